"""atomicfile: the one "write a file atomically" and the one "take a flock" (issue 11, item 2).

A reader sees the old file or the new one, never a part, whatever fails (the rename, the disk);
no temp file is left behind; the fsync rules are the caller's named choice; a symlink at the
target is replaced, never written through; a non-blocking lock says "busy" while another process
holds it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from market_timers.files import atomicfile, safefs


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.fixture
def fsyncs(monkeypatch):
    """Every fsync'd fd, as the path it pointed at (a directory or a temp file)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_write_replaces_the_content_and_sets_the_exact_mode(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old\n")
    old = os.umask(0o077)
    try:
        atomicfile.write(path, b"new\n", mode=0o644)
    finally:
        os.umask(old)
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert names(tmp_path) == ["a.json"]


def test_a_crash_between_write_and_rename_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    path.write_text("old\n")

    def crash(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="Input/output"):
        atomicfile.write(path, b"new\n")
    assert path.read_text() == "old\n"
    assert names(tmp_path) == ["state.json"]  # no temp file left


def test_a_crash_between_write_and_rename_under_safefs_leaves_the_old_file(tmp_path,
                                                                            monkeypatch):
    path = tmp_path / "alerts" / "dedup.json"
    path.parent.mkdir()
    path.write_text("old\n")
    monkeypatch.setattr(os, "replace", lambda *a, **k: (_ for _ in ()).throw(
        OSError(errno.EIO, "Input/output error")))
    with pytest.raises(OSError):
        safefs.write_json(path, {"new": 1}, base=tmp_path)
    assert path.read_text() == "old\n"
    assert names(path.parent) == ["dedup.json"]


def test_enospc_from_write_leaves_no_temp_file_and_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text("old\n")
    real = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            real(fd, bytes(data[: len(data) // 2]))  # half written, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as raised:
        atomicfile.write(path, b"new content\n" * 100)
    assert raised.value.errno == errno.ENOSPC
    assert path.read_text() == "old\n"
    assert names(tmp_path) == ["plan.json"]


def test_a_really_full_tmpfs_leaves_no_temp_file_and_the_old_content(small_tmpfs, fill_up):
    path = small_tmpfs / "state.json"
    path.write_text("old\n")
    fill_up(small_tmpfs / "filler")
    with pytest.raises(OSError) as raised:
        atomicfile.write(path, b"x" * 100_000)
    assert raised.value.errno == errno.ENOSPC
    assert path.read_text() == "old\n"
    assert names(small_tmpfs) == ["filler", "state.json"]


def test_durable_fsyncs_the_file_before_the_rename_and_the_directory_after(tmp_path, fsyncs):
    atomicfile.write(tmp_path / "a", b"x")
    [first, second] = fsyncs
    assert Path(first).parent == tmp_path and Path(first).name.startswith(".a.")  # the temp
    assert second == str(tmp_path)


@pytest.mark.parametrize("mode", [atomicfile.BATCH, atomicfile.NONE])
def test_batch_and_none_fsync_nothing_but_are_still_atomic(tmp_path, fsyncs, mode):
    atomicfile.write(tmp_path / "a", b"x", sync=mode)
    assert fsyncs == [] and (tmp_path / "a").read_bytes() == b"x"
    assert names(tmp_path) == ["a"]


def test_an_unknown_sync_rule_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="sync"):
        atomicfile.write(tmp_path / "a", b"x", sync="fast")
    assert names(tmp_path) == []


def test_a_failed_directory_flush_after_the_rename_is_told_apart(tmp_path, monkeypatch):
    real = os.fsync

    def eio_on_dirs(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fsync", eio_on_dirs)
    with pytest.raises(atomicfile.DirSyncError):
        atomicfile.write(tmp_path / "a", b"x")
    assert (tmp_path / "a").read_bytes() == b"x"  # in place: only its flush failed


def test_sync_directory_flushes_once_and_reports_failure(tmp_path, monkeypatch):
    flushes = []
    monkeypatch.setattr(atomicfile, "_syncfs", lambda fd: flushes.append(fd) or True)
    atomicfile.sync_directory(tmp_path)
    assert len(flushes) == 1

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomicfile, "_syncfs", eio)
    with pytest.raises(OSError, match="Input/output"):
        atomicfile.sync_directory(tmp_path)


def test_make_dirs_creates_the_parent(tmp_path):
    atomicfile.write(tmp_path / "a" / "b" / "c.json", b"{}", make_dirs=True)
    assert (tmp_path / "a" / "b" / "c.json").read_bytes() == b"{}"
    with pytest.raises(FileNotFoundError):
        atomicfile.write(tmp_path / "x" / "c.json", b"{}")


def test_a_symlink_at_the_target_is_replaced_never_written_through(tmp_path):
    precious = tmp_path / "shadow"
    precious.write_text("secret\n")
    link = tmp_path / "state.json"
    link.symlink_to(precious)
    atomicfile.write(link, b"new\n")
    assert precious.read_text() == "secret\n"
    assert not link.is_symlink() and link.read_text() == "new\n"


def test_safefs_still_refuses_a_symlinked_directory_below_the_base(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    base = tmp_path / "state"
    base.mkdir()
    (base / "alerts").symlink_to(outside)
    with pytest.raises(safefs.SymlinkRefused):
        safefs.write_atomic(base / "alerts" / "dedup.json", "{}", base=base)
    assert names(outside) == []


def test_a_planted_temp_name_symlink_is_not_followed(tmp_path, monkeypatch):
    precious = tmp_path / "shadow"
    precious.write_text("secret\n")
    monkeypatch.setattr(atomicfile, "temp_name", lambda name: ".planted")
    (tmp_path / ".planted").symlink_to(precious)
    with pytest.raises(FileExistsError):
        atomicfile.write(tmp_path / "a", b"x")
    assert precious.read_text() == "secret\n"
    assert (tmp_path / ".planted").is_symlink()  # not ours: left alone


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "sh" else fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path):
    """holder(path, kind) -> another process holding flock(kind) on path until the test ends."""
    procs = []

    def hold(path: Path, kind: str = "ex"):
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), kind],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline() == "held\n"
        return proc

    yield hold
    for proc in procs:
        proc.stdin.close()
        proc.wait(timeout=10)


def open_rw(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o640)


def test_a_non_blocking_lock_is_busy_while_another_process_holds_it(tmp_path, holder):
    lock = tmp_path / "x.lock"
    proc = holder(lock, "ex")
    with atomicfile.flock(open_rw(lock), wait=False) as held:
        assert held is False
    with atomicfile.flock(open_rw(lock), exclusive=False, wait=False) as held:
        assert held is False
    proc.stdin.close()
    proc.wait(timeout=10)
    with atomicfile.flock(open_rw(lock), wait=False) as held:
        assert held is True


def test_shared_locks_share_and_exclude_an_exclusive_one(tmp_path, holder):
    lock = tmp_path / "x.lock"
    holder(lock, "sh")
    with atomicfile.flock(open_rw(lock), exclusive=False, wait=False) as held:
        assert held is True
    with atomicfile.flock(open_rw(lock), wait=False) as held:
        assert held is False


def test_a_second_open_file_description_in_the_same_process_is_busy(tmp_path):
    lock = tmp_path / "x.lock"
    with atomicfile.flock(open_rw(lock)) as first:
        assert first is True
        with atomicfile.flock(open_rw(lock), wait=False) as second:
            assert second is False
    with atomicfile.flock(open_rw(lock), wait=False) as again:  # released on exit
        assert again is True


def test_the_lock_fd_is_closed_on_exit_and_on_an_error(tmp_path, monkeypatch):
    fd = open_rw(tmp_path / "x.lock")
    with atomicfile.flock(fd):
        pass
    with pytest.raises(OSError):
        os.fstat(fd)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    import fcntl

    monkeypatch.setattr(fcntl, "flock", lambda *a: (_ for _ in ()).throw(
        OSError(errno.ENOLCK, "No locks available")))
    with pytest.raises(OSError, match="No locks"), atomicfile.flock(fd):
        pass
    with pytest.raises(OSError):
        os.fstat(fd)


def test_safefs_lock_refuses_a_planted_lock_symlink(tmp_path):
    target = tmp_path / "outside" / "nologin"
    base = tmp_path / "state"
    base.mkdir()
    (base / ".lock").symlink_to(target)
    with pytest.raises(safefs.SymlinkRefused), safefs.lock(base / ".lock", base=base):
        pass
    assert not target.exists()


def test_the_module_is_import_light():
    code = ("import sys\nfrom market_timers.files import atomicfile\n"
            "print(sorted(m for m in ('json', 'fcntl', 'contextlib', 'tempfile', 'pathlib', "
            "'ctypes') if m in sys.modules))\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root / "generator")}, check=True)
    assert out.stdout.strip() == "[]"


def test_the_runners_start_path_does_not_import_it():
    """The runner keeps its own lock (runner.take_lock); the ledger and the retry marker import
    atomicfile only where they replace a file (after the job), never on the start path."""
    code = ("import sys, market_timers.runner, market_timers.ledger.local, "
            "market_timers.runner.retry, market_timers.config.retries, market_timers.runner.slotclock\n"
            "print([m for m in ('market_timers.files.atomicfile', 'market_timers.files.safefs') "
            "if m in sys.modules])\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root / "generator")}, check=True)
    assert out.stdout.strip() == "[]"


def test_create_writes_a_name_once_and_never_replaces_it(tmp_path):
    target = tmp_path / "halt-orders"
    assert atomicfile.create(target, "reason=first\n", mode=0o644) is True
    assert atomicfile.create(target, "reason=second\n", mode=0o644) is False
    assert target.read_text() == "reason=first\n"
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["halt-orders"]  # no temp file left
