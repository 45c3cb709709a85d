"""How a run ended, from the real runner to the alert (issue 45, items 2 and 3): the runner keeps
its own account of the ending (the job exited N, was killed by signal S, or the start was
refused), the record step writes it to the run ledger, and the handler tells it. Only "exited 0"
is a success; a job's own exit status 170-179 is the job's failure, never a refusal.

Each test runs the real runner (as tests/runner/test_runner.py does), then the record step with
what systemd would pass it for that ending, then the handler with the MONITOR_* it would get."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from tests.alerts.test_alerts_handler import INVOCATION, UNIT, fake_systemd
from tests.runner.test_gate_order import halt
from tests.runner.test_runner import RUNNER, context, finish, run

from market_timers.alerts.commands import alert_handler
from market_timers.channels.credentials import OVERRIDE
from market_timers.contracts import exitcodes
from market_timers.ledger import runrecord
from market_timers.metrics.records import run_kind

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
SUPERVISED = {"MARKET_JOB_USER": "nobody"}  # the runner supervises the job as another user
JOB, SESSION = "close-report", "2026-11-30"
CLEAN = ("HUP", "INT", "TERM", "PIPE")  # signals systemd counts as a clean end of a service


def job_env(tmp_path, invocation: str = INVOCATION, **extra) -> dict:
    return context(tmp_path, MARKET_JOB=JOB, MARKET_SESSION=SESSION, INVOCATION_ID=invocation,
                   **extra)


def systemd_saw(returncode: int) -> dict:
    """$SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS for a main process that ended so."""
    if returncode < 0:
        name = signal.Signals(-returncode).name.removeprefix("SIG")
        return {"SERVICE_RESULT": "success" if name in CLEAN else "signal",
                "EXIT_CODE": "killed", "EXIT_STATUS": name}
    return {"SERVICE_RESULT": "success" if returncode == 0 else "exit-code",
            "EXIT_CODE": "exited", "EXIT_STATUS": str(returncode)}


def ended(env: dict, returncode: int) -> dict:
    """The record step, then the MONITOR_* of the handler systemd starts (failure or success)."""
    seen = systemd_saw(returncode)
    finish(env, **seen)
    return {"MONITOR_SERVICE_RESULT": seen["SERVICE_RESULT"], "MONITOR_EXIT_CODE":
            seen["EXIT_CODE"], "MONITOR_EXIT_STATUS": seen["EXIT_STATUS"],
            "MONITOR_INVOCATION_ID": INVOCATION, "MONITOR_UNIT": UNIT}


def mode(monitor: dict) -> str:
    return "success" if monitor["MONITOR_SERVICE_RESULT"] == "success" else "failure"


@pytest.fixture
def handle(make_ctx, creds, clock):
    ctx = make_ctx()

    def go(monitor: dict) -> int:
        return alert_handler(ctx, mode(monitor), UNIT, env={**monitor, OVERRIDE: str(creds)},
                             run=fake_systemd(), now=clock)

    return go


def record(tmp_path) -> dict:
    return runrecord.read(tmp_path / "state", JOB, SESSION)


def downstream(tmp_path) -> subprocess.CompletedProcess:
    """A job that `requires` close-report in the same session (another lock group)."""
    return run(context(tmp_path, MARKET_JOB="closing-orders", MARKET_SESSION=SESSION,
                       MARKET_LOCK_GROUP="closing", MARKET_REQUIRES=JOB,
                       INVOCATION_ID="1" * 32), "/bin/true")


@root_only
def test_a_supervised_job_that_sigterms_itself_fails_its_unit_and_is_told(tmp_path, handle,
                                                                          api):
    env = job_env(tmp_path, **SUPERVISED, MARKET_PAUSE_ON_FAILURE="1")
    proc = run(env, "/bin/sh", "-c", "echo half-done; kill -TERM $$; echo never")
    # not a death by SIGTERM, which systemd would count as a clean end (Result=success)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert "killed by signal TERM" in proc.stderr
    monitor = ended(env, proc.returncode)
    assert mode(monitor) == "failure"
    rec = record(tmp_path)
    assert (rec["result"], rec["exit_code"], rec["exit_status"]) == ("signal", "killed", "TERM")
    assert run_kind(rec) == "killed"
    assert (tmp_path / "state" / "ledger" / "paused-groups" / "orders").exists()
    handle(monitor)
    [msg] = api.received("telegram")
    assert msg["text"].startswith("[CRITICAL] close-report was killed by signal TERM")
    refused = downstream(tmp_path)
    assert refused.returncode == exitcodes.REQUIRES_UNMET, refused.stderr
    assert "failed (signal TERM)" in refused.stderr


def test_a_job_execd_in_place_that_sigterms_itself_is_a_failure_too(tmp_path, handle, api):
    """Without a job user the job is the unit's main process: systemd calls its SIGTERM a
    success, but the runner's account (the job ran) and the record step say it was killed."""
    env = job_env(tmp_path)
    proc = run(env, "/bin/sh", "-c", "kill -TERM $$")
    assert proc.returncode == -signal.SIGTERM
    monitor = ended(env, proc.returncode)
    assert mode(monitor) == "success"  # systemd's view: the success handler is started
    rec = record(tmp_path)
    assert (rec["result"], rec["exit_status"]) == ("signal", "TERM")
    handle(monitor)
    [msg] = api.received("telegram")
    assert msg["text"].startswith("[CRITICAL] close-report was killed by signal TERM")
    assert downstream(tmp_path).returncode == exitcodes.REQUIRES_UNMET


@pytest.mark.parametrize("supervised", [
    pytest.param(True, marks=root_only), False], ids=["supervised", "in place"])
def test_a_jobs_own_exit_178_is_its_failure_not_a_halt(tmp_path, handle, api, supervised):
    env = job_env(tmp_path, **(SUPERVISED if supervised else {}))
    proc = run(env, "/bin/sh", "-c", "exit 178")
    assert proc.returncode == 178
    handle(ended(env, proc.returncode))
    rec = record(tmp_path)
    assert "refused" not in rec and rec["exit_status"] == "178"
    assert run_kind(rec) == "failed"
    [msg] = api.received("telegram")
    assert msg["text"].startswith("[CRITICAL] close-report failed with exit status 178")
    assert downstream(tmp_path).returncode == exitcodes.REQUIRES_UNMET


@pytest.mark.parametrize("supervised", [
    pytest.param(True, marks=root_only), False], ids=["supervised", "in place"])
def test_a_clean_exit_is_a_success_as_before(tmp_path, handle, api, supervised):
    env = job_env(tmp_path, **(SUPERVISED if supervised else {}))
    proc = run(env, "/bin/true")
    assert proc.returncode == 0
    handle(ended(env, proc.returncode))
    rec = record(tmp_path)
    assert (rec["result"], rec["exit_code"], rec["exit_status"]) == ("success", "exited", "0")
    assert run_kind(rec) == "ok" and api.received() == []
    assert downstream(tmp_path).returncode == 0


def test_the_runners_own_halted_refusal_is_still_halted(tmp_path, handle, api):
    halt(tmp_path)
    env = job_env(tmp_path)
    proc = run(env, "/bin/true")
    assert proc.returncode == exitcodes.HALTED == 178
    handle(ended(env, proc.returncode))
    rec = record(tmp_path)
    assert rec["refused"] == "halted" and run_kind(rec) == "halted"
    assert api.received() == []  # the halt's own alert said it


@root_only
def test_a_stop_of_the_unit_is_a_failure_that_says_the_unit_was_stopped(tmp_path, handle, api):
    env = job_env(tmp_path, **SUPERVISED)
    proc = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", "echo go; exec sleep 30"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "go"
    proc.send_signal(signal.SIGTERM)  # systemctl stop (also `halt`, a shutdown)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    proc.stdout.close()
    proc.stderr.close()
    handle(ended(env, proc.returncode))
    rec = record(tmp_path)
    assert (rec["exit_code"], rec["exit_status"]) == ("killed", "TERM")
    assert rec["stopped"] == "the unit was stopped"
    [msg] = api.received("telegram")
    assert msg["text"].startswith("[CRITICAL] close-report was killed by signal TERM")


@root_only
def test_a_run_stopped_by_halt_is_told_as_stopped_by_halt(tmp_path, handle, api):
    env = job_env(tmp_path, **SUPERVISED)
    proc = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", "echo go; exec sleep 30"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "go"
    halt(tmp_path)
    proc.send_signal(signal.SIGTERM)  # `market-timers halt` stops the unit
    # A bound, not a timing: a lost signal shows as exit 0 when the sleep ends by itself at 30 s
    # (once, beside six e2e containers, 10 s ran out: TimeoutExpired told nothing more).
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    proc.stdout.close()
    proc.stderr.close()
    handle(ended(env, proc.returncode))
    assert record(tmp_path)["stopped_by_halt"] == "every job: runaway orders"
    [msg] = api.received("telegram")
    assert msg["text"].startswith("[CRITICAL] close-report was stopped by market-timers halt "
                                  "(every job: runaway orders)")


def status_line(rec: dict) -> str:
    """`market-timers status`'s line for the session, from the run record."""
    from market_timers.watch import status, statustable

    entry = {"job": JOB, "session": SESSION, "fire_utc": "2026-11-30T20:55:00Z", "unit": UNIT}
    row = status._job_row(entry, rec, timer="elapsed", result=status._result(entry, rec, None, 0),
                          alerts=[], node=False, requires=None)
    return statustable.table({"sessions": [{"session": SESSION, "jobs": [row]}]})


def test_status_shows_a_jobs_own_exit_178_as_failed_and_a_refusal_as_halted(tmp_path):
    env = job_env(tmp_path)
    ended(env, run(env, "/bin/sh", "-c", "exit 178").returncode)
    assert "failed (exit 178)" in status_line(record(tmp_path))
    halted = tmp_path / "halted"
    halt(halted)
    env = context(halted, MARKET_JOB=JOB, MARKET_SESSION=SESSION, INVOCATION_ID=INVOCATION)
    ended(env, run(env, "/bin/true").returncode)
    line = status_line(runrecord.read(halted / "state", JOB, SESSION))
    assert "halted (runaway orders)" in line


def test_systemd_252s_onsuccess_on_a_restart_does_not_tell_the_failed_attempt(tmp_path, handle,
                                                                             api):
    """systemd 252 also triggers OnSuccess= when Restart= restarts a failed attempt, under the
    same invocation id: that attempt's failure (a retry follows) is not alerted by it."""
    env = job_env(tmp_path)
    proc = run(env, "/bin/sh", "-c", "exit 3")
    monitor = ended(env, proc.returncode)
    assert record(tmp_path)["exit_status"] == "3"
    handle({**monitor, "MONITOR_SERVICE_RESULT": "success", "MONITOR_EXIT_CODE": "exited",
            "MONITOR_EXIT_STATUS": "0"})
    assert api.received("telegram") == []
