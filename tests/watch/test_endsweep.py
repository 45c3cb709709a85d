"""The dead-man's look at the job units' endings (issue 46): a stuck alert handler, and a failed
job unit whose record step never ran, are told (watch/endsweep.py)."""

from __future__ import annotations

import os

import pytest

from market_timers.contracts import endrecord
from market_timers.watch import deadman, endsweep
from market_timers.watch.findings import PassResult

from .conftest import utc

NOW = utc("2026-11-30T21:00:00Z")
UNIT = "market-signal@2026-11-30-204500.service"
INVOCATION = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def config(make_config):
    cfg = make_config()
    os.makedirs(cfg.state_dir, exist_ok=True)
    return cfg


def leave(config, age_sec: float, unit=UNIT, invocation=INVOCATION):
    path = endrecord.write(config.state_dir, unit, {
        "INVOCATION_ID": invocation, "SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited",
        "EXIT_STATUS": "3", "MARKET_JOB": "signal"})
    when = NOW.timestamp() - age_sec
    os.utime(path, (when, when))
    return path


def one_pass(config, systemctl, alerts, now=NOW):
    return deadman.run_pass(config, now, systemctl=systemctl, alert=alerts, env={}, ping=False)


def test_a_record_waiting_over_two_minutes_is_a_stuck_handler_told_once_per_outage(
        config, fake_systemctl, alerts):
    leave(config, 180)
    leave(config, 30, invocation="f" * 32)
    result = one_pass(config, fake_systemctl, alerts)
    [call] = [c for c in alerts.calls if c["kind"] == "alert-handler-stuck"]
    assert call["title"] == ("alert handler stuck: 2 run endings waiting since "
                             "2026-11-30T20:57:00Z")
    assert "systemctl status market-alert-ends.path" in call["text"]
    assert result.failed  # the heartbeat pings /fail
    result = one_pass(config, fake_systemctl, alerts)
    assert alerts.kinds().count("alert-handler-stuck") == 1 and result.unhealthy
    for name in os.listdir(endrecord.directory(config.state_dir)):  # the handler is back
        os.unlink(os.path.join(endrecord.directory(config.state_dir), name))
    assert not one_pass(config, fake_systemctl, alerts).unhealthy
    leave(config, 300)
    one_pass(config, fake_systemctl, alerts)
    assert alerts.kinds().count("alert-handler-stuck") == 2  # a new outage


def test_a_record_younger_than_two_minutes_is_no_news(config, fake_systemctl, alerts):
    leave(config, 100)
    result = one_pass(config, fake_systemctl, alerts)
    assert "alert-handler-stuck" not in alerts.kinds() and not result.unhealthy


def test_a_failed_job_unit_that_left_no_record_is_a_failure_alert_told_once(
        config, fake_systemctl, alerts):
    """226/NAMESPACE: the unit failed before any process ran, its record step too."""
    fake_systemctl.failed = {UNIT}
    one_pass(config, fake_systemctl, alerts)
    [call] = [c for c in alerts.calls if c["kind"] == "failed"]
    assert (call["job"], call["session"]) == ("signal", "2026-11-30")
    assert call["title"] == (f"signal failed for session 2026-11-30: its unit {UNIT} failed "
                             "and left no run ending")
    assert f"systemctl status {UNIT}" in call["text"]
    one_pass(config, fake_systemctl, alerts)
    assert alerts.kinds().count("failed") == 1


def test_the_sweep_is_one_list_units_call_and_no_show_of_a_job_unit(
        config, fake_systemctl, alerts):
    fake_systemctl.failed = {UNIT, "market-other@2026-11-30-204500.service"}
    result = PassResult()
    endsweep.check_ends(config, fake_systemctl, NOW, result)
    assert [v for v, _ in fake_systemctl.calls] == ["list-failed"]
    assert len(result.new) == 2 and not result.errors


def test_a_failed_unit_whose_record_waits_or_was_told_is_left_to_the_handler(
        config, fake_systemctl, alerts):
    other = "market-other@2026-11-30-204500.service"
    fake_systemctl.failed = {UNIT, other}
    leave(config, 5)
    endrecord.mark_told(config.state_dir, other)
    one_pass(config, fake_systemctl, alerts)
    assert "failed" not in alerts.kinds()


@pytest.mark.parametrize("unit", [
    "market-signal@2026-11-30-run204500.service",  # `market-timers run`: its own OnFailure=
    "market-on-halt-1234.service",
    "market-alert-failure@market-signal@2026-11-30-204500.service.service",
    "market-outbox.service",
])
def test_units_that_keep_their_own_on_failure_are_not_swept(config, fake_systemctl, alerts, unit):
    fake_systemctl.failed = {unit}
    one_pass(config, fake_systemctl, alerts)
    assert "failed" not in alerts.kinds()


@pytest.mark.parametrize("unit,session", [
    ("market-signal@daily.service", "2026-11-30"),
    ("market-signal@try-20261130T204500Z.service", "try-20261130T204500Z"),
    ("market-signal@2026-11-30-143000-0a1b2c3d.service", "2026-11-30"),
])
def test_daily_try_and_periodic_units_are_swept_too(config, fake_systemctl, alerts, unit,
                                                     session):
    fake_systemctl.failed = {unit}
    one_pass(config, fake_systemctl, alerts)
    [call] = [c for c in alerts.calls if c["kind"] == "failed"]
    assert call["session"] == session


def test_a_told_mark_is_forgotten_once_its_unit_is_no_longer_failed(config, fake_systemctl,
                                                                    alerts):
    endrecord.mark_told(config.state_dir, UNIT)
    mark = os.path.join(config.state_dir, endrecord.TOLD_DIR, UNIT)
    os.utime(mark, (NOW.timestamp() - 60, NOW.timestamp() - 60))  # told a minute ago
    one_pass(config, fake_systemctl, alerts)
    assert UNIT in endrecord.told(config.state_dir)  # may still be settling
    one_pass(config, fake_systemctl, alerts, now=utc("2026-12-01T21:00:00Z"))
    assert endrecord.told(config.state_dir) == {}


def test_a_sweep_that_cannot_ask_systemd_pings_fail_and_the_pass_goes_on(config, fake_systemctl,
                                                                          alerts):
    def broken(patterns):
        raise FileNotFoundError("systemctl")

    fake_systemctl.failed_units = broken
    leave(config, 180)
    result = one_pass(config, fake_systemctl, alerts)
    assert "alert-handler-stuck" in alerts.kinds()  # what could be checked was
    assert any("cannot check the job units' endings" in u for u in result.unhealthy)
