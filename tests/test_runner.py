"""The runner: stale starts refused, one run per lock group, locks freed by the OS, exec in place."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from market_timers import exitcodes

RUNNER = [sys.executable, "-m", "market_timers.runner"]


def context(tmp_path: Path, scheduled: datetime | None = None, **extra) -> dict:
    scheduled = scheduled or datetime.now(UTC)
    env = dict(os.environ)
    env.update(MARKET_JOB="signal", MARKET_SESSION="2025-11-28", MARKET_CALENDAR="XNYS",
               MARKET_EVENT="close", MARKET_SCHEDULED_UTC=scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
               MARKET_GRACE_SEC="60", MARKET_LOCK_GROUP="orders",
               MARKET_LOCK_DIR=str(tmp_path / "run"), MARKET_STATE_DIR=str(tmp_path / "state"))
    env.pop("JOURNAL_STREAM", None)
    env.update(extra)
    return env


def run(env: dict, *command: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNNER, "--", *command], env=env, capture_output=True, text=True,
                          timeout=30, **kw)


@contextmanager
def running_job(tmp_path: Path, script: str, **extra):
    """A run of the runner whose job is `sh -c script`, after its first line of output."""
    proc = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", script],
                            env=context(tmp_path, **extra), stdout=subprocess.PIPE, text=True)
    try:
        proc.first_line = proc.stdout.readline().strip()
        yield proc
    finally:
        proc.kill()
        proc.wait()


def record(tmp_path: Path, job: str = "signal", session: str = "2025-11-28") -> dict:
    return json.loads((tmp_path / "state" / "runs" / job / f"{session}.json").read_text())


def test_start_later_than_grace_is_refused_with_the_stale_code(tmp_path):
    marker = tmp_path / "ran"
    env = context(tmp_path, datetime.now(UTC) - timedelta(seconds=75))
    proc = run(env, "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.STALE_START == 170
    assert not marker.exists()
    assert "stale start" in proc.stderr and "grace of 60 s" in proc.stderr
    assert record(tmp_path)["refused"] == "stale-start"


def test_start_within_grace_runs_the_job_with_its_context(tmp_path):
    env = context(tmp_path, datetime.now(UTC) - timedelta(seconds=30))
    proc = run(env, "/usr/bin/env")
    assert proc.returncode == 0, proc.stderr
    seen = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert seen["MARKET_JOB"] == "signal" and seen["MARKET_SESSION"] == "2025-11-28"
    assert seen["MARKET_CALENDAR"] == "XNYS" and seen["MARKET_EVENT"] == "close"
    assert seen["MARKET_SCHEDULED_UTC"] == env["MARKET_SCHEDULED_UTC"]
    assert seen["PYTHONFAULTHANDLER"] == "1"


def test_job_exit_status_passes_through(tmp_path):
    proc = run(context(tmp_path), "/bin/sh", "-c", "exit 3")
    assert proc.returncode == 3


def test_runner_pid_is_the_job_pid(tmp_path):
    """exec in place: the unit's main PID is the job (WatchdogSec= needs NotifyAccess=main)."""
    with running_job(tmp_path, "echo $$; sleep 5") as proc:
        assert int(proc.first_line) == proc.pid
        assert f"pid {proc.pid} " in (tmp_path / "run" / "orders.lock").read_text()


def test_second_run_in_a_busy_lock_group_is_skipped_and_names_the_holder(tmp_path):
    with running_job(tmp_path, "echo go; sleep 10") as first:
        assert first.first_line == "go"  # holds the lock now
        marker = tmp_path / "second-ran"
        env = context(tmp_path, MARKET_JOB="closing-orders")
        proc = run(env, "/usr/bin/touch", str(marker))
        assert proc.returncode == exitcodes.OVERLAP_SKIPPED == 171
        assert not marker.exists()
        assert f"held by pid {first.pid} job signal session 2025-11-28 since" in proc.stderr
        assert "dropped, not queued" in proc.stderr
        assert record(tmp_path, "closing-orders")["refused"] == "overlap-skipped"


def test_lock_of_a_holder_killed_with_sigkill_is_freed(tmp_path):
    # `exec sleep`: a child would inherit the lock fd and keep the lock (under systemd the whole
    # cgroup is killed with the job, children included).
    with running_job(tmp_path, "echo go; exec sleep 30") as holder:
        assert holder.first_line == "go"
        assert run(context(tmp_path), "/bin/true").returncode == exitcodes.OVERLAP_SKIPPED
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert run(context(tmp_path), "/bin/true").returncode == 0


def test_different_lock_groups_run_side_by_side(tmp_path):
    with running_job(tmp_path, "echo go; sleep 10") as holder:
        assert holder.first_line == "go"
        proc = run(context(tmp_path, MARKET_LOCK_GROUP="broker"), "/bin/true")
        assert proc.returncode == 0


def test_missing_program_is_a_runner_error(tmp_path):
    proc = run(context(tmp_path), "/nonexistent/job")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "cannot run /nonexistent/job" in proc.stderr


def test_missing_context_is_a_runner_error(tmp_path):
    env = context(tmp_path)
    del env["MARKET_JOB"]
    assert run(env, "/bin/true").returncode == exitcodes.RUNNER_ERROR


def test_daily_job_is_judged_against_todays_utc_time(tmp_path):
    now = datetime.now(UTC)
    env = context(tmp_path, MARKET_DAILY_UTC=(now - timedelta(minutes=10)).strftime("%H:%M:%S"))
    del env["MARKET_SCHEDULED_UTC"]
    del env["MARKET_SESSION"]
    proc = run(env, "/bin/true")  # 10 min late with 60 s grace
    assert proc.returncode == exitcodes.STALE_START


def test_record_completes_the_run_with_how_the_service_ended(tmp_path):
    env = context(tmp_path)
    assert run(env, "/bin/true").returncode == 0
    env.update(SERVICE_RESULT="watchdog", EXIT_CODE="killed", EXIT_STATUS="ABRT")
    subprocess.run([*RUNNER[:-1], "market_timers.runner", "--record"], env=env, check=True)
    rec = record(tmp_path)
    assert (rec["result"], rec["exit_code"], rec["exit_status"]) == ("watchdog", "killed", "ABRT")
    assert rec["scheduled_utc"] == env["MARKET_SCHEDULED_UTC"] and rec["duration_sec"] >= 0


def test_runner_does_not_import_pandas_or_exchange_calendars():
    code = ("import sys, market_timers.runner, market_timers.jobnotify; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pandas', 'numpy', 'exchange_calendars', 'jinja2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_jobnotify_is_a_no_op_outside_systemd(monkeypatch):
    from market_timers import jobnotify

    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    jobnotify.ready()
    jobnotify.heartbeat()
    jobnotify.status("x")
    assert jobnotify.watchdog_interval() is None


def test_jobnotify_sends_to_the_notify_socket(tmp_path, monkeypatch):
    import socket

    from market_timers import jobnotify

    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setattr(jobnotify, "_notifier", None)
    jobnotify.ready()
    jobnotify.heartbeat()
    jobnotify.status("computing  weights")
    got = [sock.recv(256).decode() for _ in range(3)]
    sock.close()
    assert got == ["READY=1", "WATCHDOG=1", "STATUS=computing weights"]


def test_start_record_is_valid_json_even_with_odd_characters(tmp_path):
    from market_timers import runstart

    fields = {"refused": 'a "quoted"\\ name\n', "late_sec": 1.5, "pid": 7, "result": None}
    runstart.write_start(str(tmp_path / "state"), "signal", "2025-11-28", fields)
    assert record(tmp_path, "signal", "2025-11-28") == {
        "job": "signal", "session": "2025-11-28", **fields}


def test_malformed_scheduled_instant_is_a_runner_error(tmp_path):
    proc = run(context(tmp_path, MARKET_SCHEDULED_UTC="2025-11-28 17:45"), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "MARKET_SCHEDULED_UTC='2025-11-28 17:45' is not YYYY-MM-DDTHH:MM:SSZ" in proc.stderr
