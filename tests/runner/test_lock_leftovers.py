"""Issue 41 item 5: a lock group is held until the processes of its last run are all gone (the
run's unit's cgroup holds none of the job's), not only until the supervisor ends: a job that
double-forks a child and exits, or whose supervisor is SIGKILLed after it cleared its
parent-death signal, leaves processes that systemd stops only within the unit's stop timeout.

The cgroup file system and /proc are faked (lockgroup's CGROUP_ROOT, PROC, SELF_CGROUP): a
unit test cannot make a systemd unit; tests/e2e/test_hostile_job.py runs the real thing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from market_timers.runner import lockgroup

UNIT_A = "/system.slice/system-market.slice/market-forker@2026-12-05T1430.service"
UNIT_B = "/system.slice/system-market.slice/market-follower@2026-12-05T1431.service"
JOB_UID = 4242  # the job's own user: never the package's (jobuser.resolve refuses that)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake cgroup tree and /proc; in_unit(path) makes the runner's own cgroup `path`."""
    monkeypatch.setattr(lockgroup, "CGROUP_ROOT", str(tmp_path / "cgroup"))
    monkeypatch.setattr(lockgroup, "PROC", str(tmp_path / "proc"))
    monkeypatch.setattr(lockgroup, "SELF_CGROUP", str(tmp_path / "self-cgroup"))

    class Host:
        hierarchy = ""  # "": cgroup v2 alone; "unified": hybrid; "systemd": v1's name=systemd

        def in_unit(self, path: str) -> None:
            if self.hierarchy == "systemd":
                text = f"1:name=systemd:{path}\n0::/\n"
            else:
                text = f"12:memory:/\n0::{path}\n"
            (tmp_path / "self-cgroup").write_text(text)
            if path.endswith(".service"):  # the unit's cgroup exists while it runs
                self.processes(path)

        def processes(self, path: str, *pids_uids: tuple[int, int]) -> Path:
            where = tmp_path / "cgroup" / self.hierarchy / path.lstrip("/")
            where.mkdir(parents=True, exist_ok=True)
            (where / "cgroup.procs").write_text("".join(f"{p}\n" for p, _ in pids_uids))
            for pid, uid in pids_uids:
                (tmp_path / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
                (tmp_path / "proc" / str(pid) / "status").write_text(
                    f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
            return where

    return Host()


def take(tmp_path, job: str, session: str = "2026-12-05") -> int | None:
    return lockgroup.take_lock(str(tmp_path / "run"), "books", job, session)


def ended_in_unit_a(tmp_path, host) -> None:
    """A run of `forker` in unit A took the group's lock and ended (its fd closed)."""
    host.in_unit(UNIT_A)
    fd = take(tmp_path, "forker")
    assert fd is not None
    os.close(fd)
    host.in_unit(UNIT_B)


def test_the_holders_note_names_its_units_cgroup(tmp_path, host):
    host.in_unit(UNIT_A)
    fd = take(tmp_path, "forker")
    try:
        note = (tmp_path / "run" / "locks" / "books.lock").read_text()
        assert note.startswith(f"pid {os.getpid()} job forker session 2026-12-05 since ")
        assert note.rstrip("\n").endswith(f" cgroup {tmp_path}/cgroup{UNIT_A}")
    finally:
        os.close(fd)


def test_a_process_the_last_run_left_in_its_unit_keeps_the_group_busy(tmp_path, host, capsys):
    ended_in_unit_a(tmp_path, host)
    host.processes(UNIT_A, (777, JOB_UID))  # a double-forked child, or the job itself

    assert take(tmp_path, "follower") is None
    err = capsys.readouterr().err
    assert "lock group 'books' is busy" in err
    assert "job forker session 2026-12-05" in err
    assert "market-forker@2026-12-05T1430.service" in err and "pid 777 of uid 4242" in err
    assert "this run of follower for session 2026-12-05 is dropped, not queued" in err
    # the refused start did not take the note: the next one still probes unit A
    assert (tmp_path / "run" / "locks" / "books.lock").read_text().rstrip().endswith(UNIT_A)


def test_the_group_is_free_once_the_units_processes_are_gone(tmp_path, host):
    ended_in_unit_a(tmp_path, host)
    where = host.processes(UNIT_A, (777, JOB_UID))
    assert take(tmp_path, "follower") is None
    (where / "cgroup.procs").write_text("")  # systemd stopped the leftover; unit still loaded
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)


def test_a_collected_unit_holds_nothing(tmp_path, host):
    ended_in_unit_a(tmp_path, host)  # no cgroup directory for unit A at all
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)


def test_the_runners_own_processes_in_the_unit_do_not_hold_the_group(tmp_path, host):
    """The last run's record step (ExecStopPost=) runs in its unit as the package's user."""
    ended_in_unit_a(tmp_path, host)
    host.processes(UNIT_A, (778, os.geteuid()))
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)


def test_a_process_gone_between_the_two_reads_holds_nothing(tmp_path, host):
    ended_in_unit_a(tmp_path, host)
    where = host.processes(UNIT_A)
    (where / "cgroup.procs").write_text("779\n")  # listed, but no /proc/779 any more
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)


def test_a_process_in_a_child_cgroup_of_the_unit_holds_the_group(tmp_path, host):
    ended_in_unit_a(tmp_path, host)
    host.processes(UNIT_A)
    host.processes(UNIT_A + "/sub", (780, JOB_UID))
    assert take(tmp_path, "follower") is None


def test_a_restart_of_the_same_unit_is_not_held_by_itself(tmp_path, host):
    """systemd starts a unit again only once its last processes are gone; the unit's cgroup
    holds the runner itself and is never probed."""
    ended_in_unit_a(tmp_path, host)
    host.in_unit(UNIT_A)
    host.processes(UNIT_A, (os.getpid(), JOB_UID))
    fd = take(tmp_path, "forker")
    assert fd is not None
    os.close(fd)


@pytest.mark.parametrize("hierarchy", ["unified", "systemd"])
def test_a_hybrid_or_legacy_hierarchy_is_probed_where_the_units_processes_are(tmp_path, host,
                                                                             hierarchy):
    """cgroup v2 at /sys/fs/cgroup/unified beside v1's (hybrid), or v1's name=systemd alone
    (legacy): seen on a Debian 12 booted in a container of a hybrid host."""
    host.hierarchy = hierarchy
    ended_in_unit_a(tmp_path, host)
    note = (tmp_path / "run" / "locks" / "books.lock").read_text()
    assert f" cgroup {tmp_path}/cgroup/{hierarchy}{UNIT_A}\n" in note
    host.processes(UNIT_A, (777, JOB_UID))
    assert take(tmp_path, "follower") is None
    host.processes(UNIT_A)
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)


def test_a_note_naming_a_directory_outside_the_cgroup_tree_is_not_probed(tmp_path, host):
    """Only the package's user writes the notes; still, a note is never a path to read freely."""
    host.in_unit(UNIT_B)
    outside = tmp_path / "elsewhere.service"
    outside.mkdir()
    (outside / "cgroup.procs").write_text("1\n")
    (tmp_path / "run" / "locks").mkdir(parents=True, mode=0o700)
    (tmp_path / "run" / "locks" / "books.lock").write_text(
        f"pid 1 job forker session 2026-12-05 since 2026-12-05T14:30:00Z cgroup {outside}\n")
    os.chmod(tmp_path / "run" / "locks" / "books.lock", 0o600)
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)


def test_a_run_outside_a_service_notes_no_cgroup_and_probes_none(tmp_path, host):
    """By hand or in the root cgroup (a container): no unit whose end to wait for."""
    host.in_unit("/")
    fd = take(tmp_path, "forker")
    os.close(fd)
    assert " cgroup " not in (tmp_path / "run" / "locks" / "books.lock").read_text()
    (tmp_path / "run" / "locks" / "books.lock").write_text(
        "pid 1 job forker session 2026-12-05 since 2026-12-05T14:30:00Z\n")  # an older note
    fd = take(tmp_path, "follower")
    assert fd is not None
    os.close(fd)
