"""`market-timers alert-handler ends` (market-alert-ends.service): the job units' end records,
told as their OnFailure=/OnSuccess= handlers told them (issue 46: no handler instance per job
unit loaded by PID 1)."""

from __future__ import annotations

import json
import os

import pytest

from market_timers.alerts import runends
from market_timers.alerts.commands import alert_handler
from market_timers.channels.credentials import OVERRIDE
from market_timers.contracts import endrecord

UNIT = "market-close-report@2026-11-30-205500.service"
TRY_UNIT = "market-close-report@try-20261130T210000Z.service"
FIRST = "0123456789abcdef0123456789abcdef"
SECOND = "fedcba9876543210fedcba9876543210"


def systemd(states=("dead",), invocation=FIRST, retries="0"):
    """A fake `systemctl show` / journalctl: the unit's SubState goes through `states` (the last
    one stays), its InvocationID is `invocation`."""
    seen = list(states)
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[0] == "journalctl":
            return "Traceback (most recent call last):\nValueError: bad price\n"
        state = seen.pop(0) if len(seen) > 1 else seen[0]
        return (f"Environment=MARKET_JOB=close-report MARKET_SESSION=2026-11-30 "
                f"MARKET_CALENDAR=XNYS MARKET_EVENT=close MARKET_RETRIES={retries} "
                "MARKET_SCHEDULED_UTC=2026-11-30T20:55:00Z MARKET_SEVERITY=critical\n"
                f"SubState={state}\nInvocationID={invocation}\n"
                "ExecMainStartTimestampMonotonic=1000000\n"
                "ExecMainExitTimestampMonotonic=13500000\n")

    run.calls = calls
    return run


def leave(ctx, result="exit-code", status="3", unit=UNIT, invocation=FIRST, retries="0",
          code="exited", mtime=None):
    env = {"INVOCATION_ID": invocation, "SERVICE_RESULT": result, "EXIT_CODE": code,
           "EXIT_STATUS": status, "MARKET_JOB": "close-report", "MARKET_SESSION": "2026-11-30",
           "MARKET_RETRIES": retries, "PATH": "/usr/bin"}
    os.makedirs(ctx.state_dir, exist_ok=True)  # the unit's StateDirectory=
    path = endrecord.write(ctx.state_dir, unit, env)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def ends(make_ctx, creds, clock):
    ctx = make_ctx()

    def go(run=None, **waits):
        """The CLI's entry (alert-handler ends); with `waits` (sleep, clock) the loop itself."""
        env, run = {OVERRIDE: str(creds)}, run or systemd()
        if waits:
            runends.handle_all(ctx, env=env, run=run, now=clock, **waits)
            return 0
        return alert_handler(ctx, "ends", env=env, run=run, now=clock)

    go.ctx = ctx
    return go


def waiting(ctx) -> list[str]:
    return sorted(os.listdir(endrecord.directory(ctx.state_dir)))


def test_a_failed_runs_record_is_alerted_as_its_on_failure_handler_did_and_removed(ends, api):
    leave(ends.ctx)
    assert ends() == 0
    [msg] = api.received("telegram")
    assert msg["text"].startswith("[CRITICAL] close-report failed with exit status 3")
    for needle in ("session: 2026-11-30", "calendar: XNYS", f"unit: {UNIT}",
                   "ValueError: bad price"):
        assert needle in msg["text"], needle
    assert waiting(ends.ctx) == []


def test_a_success_after_the_failure_announces_the_recovery(ends, api, clock):
    leave(ends.ctx)
    ends()
    clock.advance(minutes=5)
    leave(ends.ctx, result="success", status="0", invocation=SECOND)
    ends(run=systemd(invocation=SECOND))
    texts = [m["text"] for m in api.received("telegram")]
    assert len(texts) == 2 and "recovered" in texts[1]
    assert waiting(ends.ctx) == []


def test_a_trys_success_closes_no_real_runs_alert(ends, api, clock):
    leave(ends.ctx)
    ends()
    leave(ends.ctx, result="success", status="0", unit=TRY_UNIT, invocation=SECOND)
    ends(run=systemd(invocation=SECOND))
    assert len(api.received("telegram")) == 1  # no recovery from a try
    assert waiting(ends.ctx) == []


def test_records_are_told_oldest_first(ends, monkeypatch):
    from market_timers.alerts import handler

    got = []
    monkeypatch.setattr(handler, "handle", lambda config, mode, unit, env=None, **kw:
                        got.append(env["MONITOR_INVOCATION_ID"]))
    leave(ends.ctx, status="4", invocation=SECOND, mtime=2_000_000_000)
    leave(ends.ctx, status="3", invocation=FIRST, mtime=1_000_000_000)
    ends()
    assert got == [FIRST, SECOND]


def test_a_failed_attempt_with_a_retry_to_come_waits_for_systemd_and_does_not_alert(ends, api):
    """The record step runs before systemd decides about the restart: the handler first waits
    for the unit to leave stop-post; auto-restart then says a retry follows."""
    leave(ends.ctx, retries="2")
    run = systemd(states=("stop-post", "stop-post", "auto-restart"), retries="2")
    sleeps = []
    assert ends(run=run, sleep=sleeps.append) == 0
    assert api.received("telegram") == [] and len(sleeps) == 2
    assert waiting(ends.ctx) == []


def test_on_systemd_254_a_queued_restart_is_a_retry_to_come_too(ends, api):
    leave(ends.ctx, retries="2")
    ends(run=systemd(states=("failed-before-auto-restart", "auto-restart-queued"),
                     retries="2"), sleep=lambda s: None)
    assert api.received("telegram") == []


def test_a_failed_attempt_whose_next_attempt_already_started_does_not_alert(ends, api):
    leave(ends.ctx, retries="2")
    ends(run=systemd(states=("failed",), invocation=SECOND, retries="2"))
    assert api.received("telegram") == []


def test_the_last_attempt_alerts_once(ends, api):
    leave(ends.ctx, retries="2")
    ends(run=systemd(states=("stop-post", "failed"), retries="2"), sleep=lambda s: None)
    assert len(api.received("telegram")) == 1


def test_the_wait_for_systemd_is_bounded(ends, api):
    t = [0.0]

    def sleep(s):
        t[0] += s

    leave(ends.ctx, retries="2")
    ends(run=systemd(states=("stop-post",), retries="2"), sleep=sleep, clock=lambda: t[0])
    assert runends.SETTLE_SEC <= t[0] <= runends.SETTLE_SEC + 1
    assert len(api.received("telegram")) == 1  # judged as it stands: told, not lost


def test_a_job_without_retries_is_told_at_once(ends, api):
    leave(ends.ctx)
    run = systemd(states=("stop-post",))
    ends(run=run, sleep=lambda s: pytest.fail("no wait without retries"))
    assert len(api.received("telegram")) == 1


@pytest.mark.parametrize("plant", ["symlink", "fifo", "huge", "not-json", "other-unit",
                                   "directory", "renamed"])
def test_a_bad_record_is_moved_aside_with_a_critical_alert_and_the_rest_are_told(
        ends, api, plant, tmp_path):
    directory = endrecord.directory(ends.ctx.state_dir)
    leave(ends.ctx, mtime=2_000_000_000)
    name = "a" * 32
    path = os.path.join(directory, name)
    if plant == "symlink":
        os.symlink(tmp_path / "creds" / "market-timers.telegram-token", path)
    elif plant == "fifo":
        os.mkfifo(path)
    elif plant == "huge":
        with open(path, "w") as f:
            f.write("{" + " " * endrecord.MAX_BYTES + "}")
    elif plant == "not-json":
        with open(path, "w") as f:
            f.write("not json")
    elif plant == "other-unit":
        with open(path, "w") as f:
            json.dump({"unit": "ssh.service", "invocation": name, "result": "success",
                       "exit_code": "exited", "exit_status": "0"}, f)
    elif plant == "directory":
        os.mkdir(path)
    else:  # a good record under another invocation's name
        os.rename(leave(ends.ctx, invocation=SECOND), path)
    os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)
    assert ends() == 0
    assert waiting(ends.ctx) == []  # the path unit would start the handler again and again
    bad = os.listdir(os.path.join(ends.ctx.state_dir, endrecord.BAD_DIR))
    assert [b.split(".")[0] for b in bad] == [name]
    texts = [m["text"] for m in api.received("telegram")]
    assert texts[0].startswith("[CRITICAL] a job's run ending could not be read") and path in \
        texts[0]
    assert "close-report failed with exit status 3" in texts[1]  # the good one after it


def test_a_temp_file_is_left_to_its_writer_until_a_crash_must_have_left_it(ends, api):
    directory = endrecord.directory(ends.ctx.state_dir)
    os.makedirs(directory, mode=0o700)
    temp = os.path.join(directory, f".{FIRST}.12.abcd.tmp")
    with open(temp, "w") as f:
        f.write("{")
    ends()
    assert waiting(ends.ctx) == [os.path.basename(temp)] and api.received("telegram") == []
    os.utime(temp, (1_000_000_000, 1_000_000_000))
    ends()
    assert waiting(ends.ctx) == []
    assert "could not be read" in api.received("telegram")[0]["text"]


def test_a_record_whose_telling_breaks_is_set_aside_with_a_critical_and_the_next_is_told(
        ends, api, monkeypatch):
    from market_timers.alerts import handler

    real = handler.handle
    calls = []

    def handle(config, mode, unit, env=None, **kw):
        calls.append(env["MONITOR_INVOCATION_ID"])
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(config, mode, unit, env=env, **kw)

    monkeypatch.setattr(handler, "handle", handle)
    leave(ends.ctx, invocation=FIRST, mtime=1_000_000_000)
    leave(ends.ctx, invocation=SECOND, mtime=2_000_000_000)
    assert ends() == 0
    assert calls == [FIRST, SECOND] and waiting(ends.ctx) == []
    texts = [m["text"] for m in api.received("telegram")]
    assert texts[0].startswith(f"[CRITICAL] a job's run ending could not be told: {UNIT}"), texts
    assert "RuntimeError: boom" in texts[0]
    assert "close-report failed with exit status 3" in texts[1]
    kept = os.listdir(os.path.join(ends.ctx.state_dir, endrecord.BAD_DIR))
    assert [k.split(".")[0] for k in kept] == [FIRST]  # kept for whoever looks into it


def test_the_handler_gets_the_monitor_variables_systemd_would_have_passed(ends, monkeypatch):
    from market_timers.alerts import handler

    got = []
    monkeypatch.setattr(handler, "handle",
                        lambda config, mode, unit, env=None, **kw: got.append((mode, unit, env)))
    leave(ends.ctx, result="timeout", code="killed", status="TERM")
    ends()
    [(mode, unit, env)] = got
    assert (mode, unit) == ("failure", UNIT)
    assert {k: v for k, v in env.items() if k.startswith("MONITOR_")} == {
        "MONITOR_SERVICE_RESULT": "timeout", "MONITOR_EXIT_CODE": "killed",
        "MONITOR_EXIT_STATUS": "TERM", "MONITOR_INVOCATION_ID": FIRST, "MONITOR_UNIT": UNIT}
    assert OVERRIDE in env  # the service's own environment: its credentials


def test_a_handled_failure_is_marked_told_for_the_dead_mans_sweep(ends):
    leave(ends.ctx)
    ends()
    assert UNIT in endrecord.told(ends.ctx.state_dir)


def test_the_cli_takes_ends_without_a_unit_and_failure_only_with_one(tmp_path, capsys):
    from market_timers.cli import main

    config = tmp_path / "market-timers.toml"
    config.write_text(f'calendar = "XNYS"\nstate_dir = "{tmp_path}/state"\n'
                      f'spool_dir = "{tmp_path}/spool"\n')
    assert main(["--config", str(config), "alert-handler", "ends"]) == 0
    assert main(["--config", str(config), "alert-handler", "ends", UNIT]) == 2
    assert main(["--config", str(config), "alert-handler", "failure"]) == 2


def test_a_success_forgets_the_units_told_mark(ends):
    """A daily job's one unit: yesterday's told failure must not hide today's (watch/endsweep)."""
    daily = "market-close-report@daily.service"
    leave(ends.ctx, unit=daily)
    ends()
    assert daily in endrecord.told(ends.ctx.state_dir)
    leave(ends.ctx, result="success", status="0", unit=daily, invocation=SECOND)
    ends(run=systemd(invocation=SECOND))
    assert daily not in endrecord.told(ends.ctx.state_dir)
