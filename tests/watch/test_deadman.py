"""The dead-man pass over the seed's Thanksgiving week (XNYS 2025-11-24..28), with an injected clock.

signal = close - 15 min, grace 2 min, timeout 5 min, slack 30 s (the default): a session's run is
"missed" 7 min 30 s after its instant. Regular close 21:00 UTC -> 20:45; 2025-11-28 closes at 13:00
New York (18:00 UTC) -> 17:45; 2025-11-27 is a holiday.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman

from .conftest import THANKSGIVING_CONFIG, utc

WEEK = ["2025-11-24", "2025-11-25", "2025-11-26", "2025-11-28"]
DUE = {"2025-11-24": "2025-11-24T20:45:00Z", "2025-11-25": "2025-11-25T20:45:00Z",
       "2025-11-26": "2025-11-26T20:45:00Z", "2025-11-28": "2025-11-28T17:45:00Z"}
MISS_AFTER = timedelta(minutes=2, seconds=5 * 60 + 30)  # grace + timeout + slack


@pytest.fixture
def week(make_config, fake_systemctl):
    """Config synced on Friday 2025-11-21 after the close: plan.json covers the next 10 sessions."""
    config = make_config()
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    return config


def record_run(config, session: str) -> None:
    runrecord.update(config.state_dir, "signal", session, scheduled_utc=DUE[session],
                     started_utc=DUE[session], result="success", exit_code="exited",
                     exit_status="0", duration_sec=3)


def one_pass(config, systemctl, alerts, now):
    systemctl.now = now
    return deadman.run_pass(config, now, systemctl=systemctl, alert=alerts, env={})


def every_15_min(start: str, end: str):
    t, stop = utc(start), utc(end)
    while t <= stop:
        yield t
        t += timedelta(minutes=15)


def test_plan_json_has_no_fire_on_thanksgiving_and_1745_on_the_early_close(week):
    plan = json.loads((week.state_dir / "plan.json").read_text())
    due = {e["session"]: e["fire_utc"] for e in plan["fires"] if e["job"] == "signal"}
    assert "2025-11-27" not in due
    assert {s: due[s] for s in WEEK} == DUE


def test_week_with_every_run_recorded_raises_no_alert_in_any_pass(week, fake_systemctl, alerts):
    for session in WEEK:
        record_run(week, session)
    for now in every_15_min("2025-11-24T00:00:00Z", "2025-11-29T00:00:00Z"):
        result = one_pass(week, fake_systemctl, alerts, now)
        assert result.findings == [], now
    assert alerts.calls == []


def test_holiday_without_run_record_raises_no_alert(week, fake_systemctl, alerts):
    for session in ("2025-11-24", "2025-11-25", "2025-11-26"):
        record_run(week, session)
    for now in every_15_min("2025-11-27T00:00:00Z", "2025-11-28T00:00:00Z"):
        one_pass(week, fake_systemctl, alerts, now)
    assert alerts.calls == []


def test_early_close_run_recorded_at_1745_raises_no_alert(week, fake_systemctl, alerts):
    for session in WEEK:
        record_run(week, session)
    one_pass(week, fake_systemctl, alerts, utc("2025-11-28T17:45:00Z") + MISS_AFTER * 3)
    one_pass(week, fake_systemctl, alerts, utc("2025-11-28T21:30:00Z"))  # after a normal close
    assert alerts.calls == []


def test_early_close_without_run_alerts_only_after_1745_plus_grace_timeout_slack(
        week, fake_systemctl, alerts):
    for session in ("2025-11-24", "2025-11-25", "2025-11-26"):
        record_run(week, session)
    deadline = utc("2025-11-28T17:45:00Z") + MISS_AFTER
    one_pass(week, fake_systemctl, alerts, utc("2025-11-28T17:45:00Z"))
    one_pass(week, fake_systemctl, alerts, deadline - timedelta(seconds=1))
    assert alerts.calls == []
    one_pass(week, fake_systemctl, alerts, deadline + timedelta(seconds=1))
    assert [(c["kind"], c["job"], c["session"]) for c in alerts.calls] == [
        ("missed", "signal", "2025-11-28")]
    assert "2025-11-28T17:45:00Z" in alerts.calls[0]["text"]
    assert alerts.calls[0]["job_severity"] == "critical"


def test_one_missing_run_alerts_exactly_once_across_many_passes(week, fake_systemctl, alerts):
    for session in ("2025-11-24", "2025-11-26", "2025-11-28"):
        record_run(week, session)  # 2025-11-25 never ran
    for now in every_15_min("2025-11-24T00:00:00Z", "2025-11-29T00:00:00Z"):
        one_pass(week, fake_systemctl, alerts, now)
    assert [(c["kind"], c["session"]) for c in alerts.calls] == [("missed", "2025-11-25")]


def test_missed_stays_reported_once_when_a_pass_finds_it_again(week, fake_systemctl, alerts):
    now = utc("2025-11-24T22:00:00Z")
    first = one_pass(week, fake_systemctl, alerts, now)
    second = one_pass(week, fake_systemctl, alerts, now + timedelta(minutes=1))
    assert [f.kind for f in first.new] == ["missed"]
    assert second.new == [] and [f.kind for f in second.findings] == ["missed"]
    state = json.loads((week.state_dir / "deadman.json").read_text())
    assert "missed:signal:2025-11-24" in state["reported"]


def test_stale_start_record_is_not_a_missed_run(week, fake_systemctl, alerts):
    runrecord.update(week.state_dir, "signal", "2025-11-24", scheduled_utc=DUE["2025-11-24"],
                     refused="stale-start")
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T23:00:00Z"))
    assert alerts.calls == []


def test_upcoming_timer_that_was_stopped_alerts_not_scheduled_once(week, fake_systemctl, alerts):
    unit = "market-signal@2025-11-26-204500.timer"
    fake_systemctl.active.discard(unit)
    for minute in range(5):
        one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z") +
                 timedelta(minutes=minute))
    assert [(c["kind"], c["session"]) for c in alerts.calls] == [("not-scheduled", "2025-11-26")]
    assert unit in alerts.calls[0]["text"] and "inactive" in alerts.calls[0]["text"]


def test_upcoming_timer_file_deleted_is_reported_missing(week, fake_systemctl, alerts):
    (week.unit_dir / "market-signal@2025-11-25-204500.timer").unlink()
    result = one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    assert [(f.kind, f.session) for f in result.new] == [("not-scheduled", "2025-11-25")]
    assert "is missing" in result.new[0].text


def test_session_run_early_by_hand_has_no_timer_and_that_is_not_an_alert(week, fake_systemctl,
                                                                          alerts):
    """`market-timers run` ahead of the timer: the ledger holds the run, sync withdrew the timer."""
    (week.unit_dir / "market-signal@2025-11-25-204500.timer").unlink()
    runrecord.update(week.state_dir, "signal", "2025-11-25", started_utc="2025-11-24T11:00:00Z")
    result = one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    assert result.new == [] and alerts.calls == []


def test_timers_are_not_judged_right_after_a_sync(week, fake_systemctl, alerts):
    fake_systemctl.active.clear()  # the --no-block starts have not gone through yet
    result = one_pass(week, fake_systemctl, alerts, utc("2025-11-21T22:00:10Z"))
    assert result.findings == [] and alerts.calls == []


def test_systemd_unreachable_is_a_pass_error_not_a_flood_of_alerts(week, fake_systemctl, alerts):
    fake_systemctl.broken = True
    result = one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    assert alerts.calls == [] and result.errors and result.failed


def test_nothing_planned_ahead_alerts_that_the_refresh_stopped(week, fake_systemctl, alerts):
    for now in (utc("2025-12-20T00:00:00Z"), utc("2025-12-20T00:01:00Z")):
        one_pass(week, fake_systemctl, alerts, now)
    nothing = [c for c in alerts.calls if c["kind"] == "not-scheduled"]
    assert len(nothing) == 1 and "market-refresh" in nothing[0]["text"]


def test_nothing_ahead_right_after_the_last_fire_is_quiet_until_the_refresh_is_overdue(
        make_config, fake_systemctl, alerts):
    """horizon = 1: after the session's last fire nothing is ahead until the next daily refresh."""
    config = make_config(THANKSGIVING_CONFIG.replace("horizon = 10", "horizon = 1"))
    fake_systemctl.now = utc("2025-11-24T06:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    record_run(config, "2025-11-24")
    for now in every_15_min("2025-11-24T21:00:00Z", "2025-11-25T08:00:00Z"):
        one_pass(config, fake_systemctl, alerts, now)
    assert alerts.calls == []
    one_pass(config, fake_systemctl, alerts, utc("2025-11-25T08:15:00Z"))
    assert [c["kind"] for c in alerts.calls] == ["not-scheduled"]


def test_no_plan_json_is_a_pass_error(make_config, fake_systemctl, alerts):
    config = make_config()
    result = one_pass(config, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    assert result.errors and alerts.calls == []


def test_alert_layer_failure_does_not_break_the_pass(week, fake_systemctl):
    def broken_alert(config, **kw):
        raise RuntimeError("channel exploded")

    result = deadman.run_pass(week, utc("2025-11-24T22:00:00Z"), systemctl=fake_systemctl,
                              alert=broken_alert, env={})
    assert [f.kind for f in result.new] == ["missed"]
    assert (week.state_dir / "deadman.json").exists()


def test_missed_run_marks_the_jobs_last_outcome_for_the_recovery_notice(week, fake_systemctl):
    pytest.importorskip("market_timers.alerts.api")
    deadman.run_pass(week, utc("2025-11-24T22:00:00Z"), systemctl=fake_systemctl, env={})
    outcome = json.loads((week.state_dir / "alerts" / "jobs" / "signal.json").read_text())
    assert outcome["outcome"] == "missed" and outcome["session"] == "2025-11-24"


def test_daily_utc_job_missed_once_and_ran_day_is_quiet(make_config, fake_systemctl, alerts):
    config = make_config('calendar = "XNYS"\n\n[[job]]\nname = "nightly"\nat = "02:30 UTC"\n'
                         'command = ["/bin/true"]\ntimeout = "10min"\n')
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    runrecord.update(config.state_dir, "nightly", "2025-11-22", started_utc="x")
    for now in every_15_min("2025-11-22T00:00:00Z", "2025-11-23T12:00:00Z"):
        one_pass(config, fake_systemctl, alerts, now)
    assert [(c["kind"], c["job"], c["session"]) for c in alerts.calls] == [
        ("missed", "nightly", "2025-11-23")]


def test_a_session_held_by_a_pause_is_not_missed_even_when_its_timer_did_not_fire(
        week, fake_systemctl, alerts):
    """No record at all (the timer never fired) while the job is paused: not a miss."""
    from market_timers import cli

    assert cli.main(["--config", str(week.source), "pause", "signal", "--note", "x"]) == 0
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T23:00:00Z"))
    assert alerts.calls == []
