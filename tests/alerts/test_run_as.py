"""privileges.run_as: the one fork + setuid helper (the refresh's alerts, the metrics' files)."""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import pytest

from market_timers.alerts import privileges

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")


def test_not_root_runs_in_this_process_without_forking(monkeypatch):
    monkeypatch.setattr(privileges.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(privileges.os, "fork", lambda: pytest.fail("forked as non-root"))
    monkeypatch.setattr(privileges.os, "setuid", lambda uid: pytest.fail("setuid as non-root"))
    ran = []
    assert privileges.run_as(65534, 65534, lambda: ran.append(1)) == 0
    assert ran == [1]


def test_not_root_an_exception_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(privileges.os, "geteuid", lambda: 1000)

    def boom():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        privileges.run_as(65534, 65534, boom)


@pytest.fixture
def shared_dir():
    """A directory `nobody` can write to (pytest's tmp_path is root's, mode 0700)."""
    with tempfile.TemporaryDirectory(prefix="run-as-") as d:
        os.chmod(d, 0o777)
        yield Path(d)


@root_only
def test_root_writes_the_file_as_the_other_user_and_stays_root(shared_dir):
    nobody = pwd.getpwnam("nobody")
    target = shared_dir / "written"

    def write():
        target.write_text(f"{os.getuid()} {os.getgid()} {os.getgroups()}")

    assert privileges.run_as(nobody.pw_uid, nobody.pw_gid, write) == 0
    assert os.geteuid() == 0  # the caller did not drop: only the child did
    assert target.stat().st_uid == nobody.pw_uid
    assert target.read_text() == f"{nobody.pw_uid} {nobody.pw_gid} []"  # no root groups kept


@root_only
def test_root_the_child_cannot_write_what_only_root_may(shared_dir):
    nobody = pwd.getpwnam("nobody")
    private = shared_dir / "private"
    private.mkdir(mode=0o700)

    def write():
        (private / "x").write_text("x")

    status = privileges.run_as(nobody.pw_uid, nobody.pw_gid, write,
                               on_error=lambda e: (shared_dir / "error").write_text(
                                   type(e).__name__))
    assert status != 0
    assert not (private / "x").exists()
    assert (shared_dir / "error").read_text() == "PermissionError"  # on_error ran in the child


@root_only
def test_root_an_exception_in_the_child_is_a_nonzero_status_not_a_raise(shared_dir):
    nobody = pwd.getpwnam("nobody")

    def boom():
        raise RuntimeError("bug")

    assert privileges.run_as(nobody.pw_uid, nobody.pw_gid, boom) != 0
    assert os.geteuid() == 0


@root_only
def test_root_metrics_are_written_as_the_state_dirs_owner(shared_dir, monkeypatch):
    """sync and the refresh run as root: the metrics' files must stay the package user's."""
    from datetime import UTC, datetime

    from market_timers import metrics
    from market_timers.config import loader as config

    nobody = pwd.getpwnam("nobody")
    state, prom = shared_dir / "state", shared_dir / "prom"
    for d in (state, prom):
        d.mkdir()
        os.chown(d, nobody.pw_uid, nobody.pw_gid)
    path = shared_dir / "market-timers.toml"
    path.write_text(f'state_dir = "{state}"\nspool_dir = "{shared_dir}/spool"\n'
                    f'calendar = "XNYS"\n[metrics]\ntextfile = "{prom}/market_timers.prom"\n'
                    '[[job]]\nname = "signal"\nevent = "close"\ncommand = ["/usr/bin/true"]\n')
    cfg = config.load(path)
    monkeypatch.setattr(metrics, "directory_exists", lambda p: p == str(prom))
    assert metrics.update(cfg, datetime(2025, 11, 26, 21, 30, tzinfo=UTC)) == \
        prom / "market_timers.prom"
    assert (prom / "market_timers.prom").stat().st_uid == nobody.pw_uid
    assert {p.stat().st_uid for p in (state / "metrics").iterdir()} == {nobody.pw_uid}
