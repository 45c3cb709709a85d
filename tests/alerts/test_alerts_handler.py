"""The OnFailure/OnSuccess handlers: what reaches the fake Telegram/Slack for each way a run ends."""

from __future__ import annotations

import pytest

from market_timers.alerts.api import raise_alert
from market_timers.alerts.commands import alert_handler
from market_timers.alerts.context import AlertContext
from market_timers.channels.credentials import OVERRIDE
from market_timers.config.alerts import parse_alerts
from market_timers.contracts.outcomes import classify
from market_timers.schema.problems import Problems

UNIT = "market-close-report@2026-11-30-205500.service"
INVOCATION = "0123456789abcdef0123456789abcdef"


def fake_systemd(severity="critical", journal="starting\nTraceback (most recent call last):\nValueError: bad price", extra=""):
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[0] == "systemctl":
            return ("Environment=MARKET_JOB=close-report MARKET_SESSION=2026-11-30 "
                    "MARKET_CALENDAR=XNYS MARKET_EVENT=close "
                    f"MARKET_SCHEDULED_UTC=2026-11-30T20:55:00Z MARKET_SEVERITY={severity}"
                    f"{extra}\n"
                    "ExecMainStartTimestampMonotonic=1000000\n"
                    "ExecMainExitTimestampMonotonic=13500000\n")
        if argv[0] == "journalctl":
            assert f"_SYSTEMD_INVOCATION_ID={INVOCATION}" in argv
            return journal + "\n"
        return ""

    run.calls = calls
    return run


def monitor(result, code, status):
    return {"MONITOR_SERVICE_RESULT": result, "MONITOR_EXIT_CODE": code,
            "MONITOR_EXIT_STATUS": status, "MONITOR_INVOCATION_ID": INVOCATION,
            "MONITOR_UNIT": UNIT}


@pytest.fixture
def handle(make_ctx, creds, clock):
    ctx = make_ctx()

    def go(mode, env, run=None, ctx_=None):
        env = {**env, OVERRIDE: str(creds)}
        return alert_handler(ctx_ or ctx, mode, UNIT, env=env, run=run or fake_systemd(),
                             now=clock)

    go.ctx = ctx
    return go


@pytest.mark.parametrize("result,code,status,kind", [
    ("exit-code", "exited", "3", "failed"),
    ("watchdog", "killed", "ABRT", "watchdog"),
    ("timeout", "killed", "TERM", "timeout"),
    ("signal", "killed", "KILL", "killed"),
    ("oom-kill", "killed", "KILL", "killed"),
    ("exit-code", "exited", "170", "stale-start"),
    ("exit-code", "exited", "171", "overlap-skipped"),
    ("exit-code", "exited", "172", "runner-error"),
    ("exit-code", "exited", "173", "already-ran"),
    ("success", "exited", "0", "ok"),
])
def test_monitor_variables_classify_into_kinds(result, code, status, kind):
    assert classify(result, code, status, success=(result == "success")) == kind


def test_failed_job_alert_carries_job_context_and_its_journal_excerpt(handle, api):
    assert handle("failure", monitor("exit-code", "exited", "3")) == 0
    [msg] = api.received("telegram")
    text = msg["text"]
    assert text.startswith("[CRITICAL] close-report failed with exit status 3")
    for needle in ("session: 2026-11-30", "calendar: XNYS", "scheduled: 2026-11-30T20:55:00Z",
                   f"unit: {UNIT}", "ValueError: bad price", "market-timers ack"):
        assert needle in text


def test_watchdog_kill_is_reported_as_a_hang(handle, api):
    handle("failure", monitor("watchdog", "killed", "ABRT"))
    [msg] = api.received("telegram")
    assert "close-report hung: killed by the watchdog" in msg["text"]


def test_stale_start_of_a_critical_job_is_critical(handle, api):
    handle("failure", monitor("exit-code", "exited", "170"))
    [msg] = api.received()
    assert msg["service"] == "telegram" and "stale start" in msg["text"]


@pytest.mark.parametrize(("extra", "said", "not_said"), [
    # issue 44: an order job is never run outside the cluster ledger, whatever on_db_unreachable
    (" MARKET_ORDERS=1 MARKET_ON_DB_UNREACHABLE=run",
     "an order job never runs outside the cluster ledger", "on_db_unreachable = skip"),
    # with on_db_unreachable = run, 175 is a login refused or a reached ledger failing
    (" MARKET_ON_DB_UNREACHABLE=run", "refused this node's login or failed",
     "on_db_unreachable = skip"),
    (" MARKET_ON_DB_UNREACHABLE=skip", "cannot be reached (on_db_unreachable = skip)", "order"),
])
def test_a_refusal_175_says_what_is_true_of_its_job(handle, api, extra, said, not_said):
    """Before: every 175 said "cannot be reached (on_db_unreachable = skip)", also for an order
    job (never run outside the ledger) and for a login refused (a configuration error)."""
    handle("failure", monitor("exit-code", "exited", "175"), run=fake_systemd(extra=extra))
    [msg] = api.received("telegram")
    title = msg["text"].splitlines()[0]
    assert "close-report did not run for session 2026-11-30" in title
    assert said in title and not_said not in title


def test_overlap_skip_is_a_warning_on_slack(handle, api):
    handle("failure", monitor("exit-code", "exited", "171"))
    [msg] = api.received()
    assert msg["service"] == "slack" and msg["text"].startswith("[WARNING]")


def test_already_ran_is_a_warning_on_slack_not_a_failure(handle, api):
    """173: a second start of a session that ran was refused (run ledger): told, not alarming."""
    handle("failure", monitor("exit-code", "exited", "173"))
    [msg] = api.received()
    assert msg["service"] == "slack"
    assert msg["text"].startswith("[WARNING] close-report already ran for session 2026-11-30: "
                                  "this second start was refused")


def test_failure_of_a_warning_job_goes_to_slack(handle, api):
    handle("failure", monitor("exit-code", "exited", "1"), run=fake_systemd(severity="warning"))
    assert [m["service"] for m in api.received()] == ["slack"]


def test_success_after_success_sends_nothing(handle, api):
    handle("success", monitor("success", "exited", "0"))
    handle("success", monitor("success", "exited", "0"))
    assert api.received() == []


def test_success_after_failure_sends_recovery_on_the_failure_channel(handle, api, clock):
    handle("failure", monitor("exit-code", "exited", "3"))
    clock.advance(days=1)
    handle("success", monitor("success", "exited", "0"))
    handle("success", monitor("success", "exited", "0"))  # a second success: silent again
    texts = [m["text"] for m in api.received("telegram")]
    assert len(texts) == 2 and "recovered" in texts[1]
    assert api.received("slack") == []


def test_success_after_a_missed_run_sends_recovery(handle, api, clock):
    raise_alert(handle.ctx, kind="missed", job="close-report", session="2026-11-27",
                text="no run record for the 20:55 fire")
    clock.advance(days=3)
    handle("success", monitor("success", "exited", "0"))
    texts = [m["text"] for m in api.received("telegram")]
    assert "did not run for session 2026-11-27" in texts[0]
    assert "recovered" in texts[1] and "had missed" in texts[1]


def test_unit_name_is_parsed_when_systemctl_show_gives_nothing(handle, api):
    handle("failure", monitor("exit-code", "exited", "2"), run=lambda argv: "")
    [msg] = api.received("telegram")
    assert "close-report failed with exit status 2" in msg["text"]
    assert "scheduled: 2026-11-30T20:55:00Z" in msg["text"]


def test_handler_without_alerts_config_exits_0_and_spools_nothing(tmp_path, api, creds, clock):
    ctx = AlertContext(parse_alerts(None, Problems()), tmp_path / "s", tmp_path / "q", now=clock,
                       env={OVERRIDE: str(creds)})
    rc = alert_handler(ctx, "failure", UNIT, env=monitor("exit-code", "exited", "3"),
                       run=fake_systemd(), now=clock)
    assert rc == 0
    assert api.received() == [] and ctx.outbox.load_all() == []
    assert ctx.state.job_outcome("close-report")["outcome"] == "failed"


def test_handler_exits_0_even_when_every_channel_is_down(handle, api):
    api.fail_next("telegram", 500, times=5)
    api.fail_next("slack", 500, times=5)
    assert handle("failure", monitor("exit-code", "exited", "3")) == 0
    [a] = handle.ctx.outbox.load_all()
    assert a.kind == "failed" and a.channel == "telegram"


def _show(substate: str, invocation: str, retries: str | None):
    env = f"MARKET_JOB=quotes MARKET_SESSION=2025-11-26{' MARKET_RETRIES=' + retries if retries else ''}"

    def run(argv):
        if argv[:2] == ["systemctl", "show"]:
            return f"Environment={env}\nSubState={substate}\nInvocationID={invocation}\n"
        return ""
    return run


def test_a_failed_attempt_systemd_will_restart_is_not_alerted_yet():
    """systemd 254+ runs OnFailure= before each automatic restart (252 does not): the handler
    waits for the last attempt of a job with retries."""
    from market_timers.alerts.handler import retry_pending, unit_context

    unit = "market-quotes@2025-11-26-143000.service"
    pending = unit_context(unit, _show("auto-restart", "a" * 32, "2"))
    assert retry_pending(pending, "a" * 32)
    restarted = unit_context(unit, _show("running", "b" * 32, "2"))
    assert retry_pending(restarted, "a" * 32)
    final = unit_context(unit, _show("failed", "a" * 32, "2"))
    assert not retry_pending(final, "a" * 32)
    # A job without retries always alerts, even if its unit was started again meanwhile.
    again = unit_context(unit, _show("running", "b" * 32, None))
    assert not retry_pending(again, "a" * 32)
    assert not retry_pending(unit_context(unit, _show("auto-restart", "a" * 32, "0")), "a" * 32)


def test_a_failed_unit_of_the_package_itself_is_alerted_at_once_and_named(make_ctx, creds, clock,
                                                                           api):
    """market-outbox.service has OnFailure=market-alert-failure@%n.service: the handler sends
    directly, so the alert does not wait for the outbox that failed."""
    env = {**monitor("exit-code", "exited", "1"), "MONITOR_UNIT": "market-outbox.service",
           OVERRIDE: str(creds)}
    assert alert_handler(make_ctx(), "failure", "market-outbox.service", env=env,
                         run=lambda argv: "", now=clock) == 0
    [msg] = api.received("telegram")
    head = msg["text"].splitlines()[0]
    assert head.startswith("[CRITICAL] market-outbox.service failed (exit-code, exited, 1): a part "
                           "of market-timers itself is not working")
