"""PagerDuty (Events API v2) against a fake on loopback: trigger, resolve on recovery, dedup_key."""

from __future__ import annotations

import logging

from tests.alerts.conftest import PD_KEY

from market_timers.alerts import delivery
from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.commands import alert_test


def pd_ctx(make_ctx, api, **over):
    raw = {"pagerduty": {"api_base": api.base, "source": "trading-1"},
           "telegram": {"chat_id": "-1", "api_base": api.base}}
    routes = {"critical": "pagerduty", "warning": "pagerduty", "info": "digest"}
    return make_ctx(raw, routes=routes, fallback=["pagerduty", "telegram"], **over)


def test_a_failure_triggers_and_the_recovery_resolves_the_same_incident(make_ctx, api):
    ctx = pd_ctx(make_ctx, api)
    raise_alert(ctx, kind="failed", job="signal", session="2026-11-30", job_severity="critical",
                details={"journal": "Traceback: boom"})
    [trigger] = api.received("pagerduty")
    event = trigger["event"]
    assert trigger["action"] == "trigger" and trigger["severity"] == "critical"
    assert event["routing_key"] == PD_KEY and event["payload"]["source"] == "trading-1"
    assert event["payload"]["component"] == "signal" and event["payload"]["class"] == "failed"
    assert "Traceback: boom" in event["payload"]["custom_details"]["text"]
    key = trigger["dedup_key"]
    assert api.incidents == {key: "triggered"}
    record_success(ctx, job="signal", session="2026-12-01")
    resolve = api.received("pagerduty")[-1]
    assert resolve["action"] == "resolve" and resolve["dedup_key"] == key
    assert api.incidents == {key: "resolved"}


def test_an_older_sessions_recovery_leaves_a_newer_failure_triggered(make_ctx, api):
    ctx = pd_ctx(make_ctx, api)
    raise_alert(ctx, kind="failed", job="signal", session="2026-11-27", job_severity="critical")
    raise_alert(ctx, kind="failed", job="signal", session="2026-11-30", job_severity="critical")
    record_success(ctx, job="signal", session="2026-11-27")
    assert set(api.incidents.values()) == {"triggered"}
    record_success(ctx, job="signal", session="2026-11-30")
    assert set(api.incidents.values()) == {"resolved"}


def test_one_incident_per_job_whatever_went_wrong_and_another_for_another_job(make_ctx, api):
    ctx = pd_ctx(make_ctx, api, dedup_minutes=0)
    raise_alert(ctx, kind="failed", job="signal", job_severity="critical")
    raise_alert(ctx, kind="missed", job="signal", job_severity="critical")
    raise_alert(ctx, kind="watchdog", job="orders", job_severity="critical")
    keys = [m["dedup_key"] for m in api.received("pagerduty")]
    assert keys[0] == keys[1] != keys[2]


def test_severity_maps_to_pagerduty_severity(make_ctx, api):
    ctx = pd_ctx(make_ctx, api)
    raise_alert(ctx, kind="failed", job="report", job_severity="warning")
    assert [m["severity"] for m in api.received("pagerduty")] == ["warning"]


def test_429_waits_for_retry_after_then_delivers(make_ctx, api, clock):
    ctx = pd_ctx(make_ctx, api)
    api.fail_next("pagerduty", 429, retry_after=120)
    alert = raise_alert(ctx, kind="failed", job="signal", job_severity="critical")
    assert api.received() == []
    clock.advance(seconds=60)
    assert delivery.flush(ctx)[delivery.WAITING] == 1 and api.received() == []
    clock.advance(seconds=61)
    assert delivery.flush(ctx)[delivery.DELIVERED] == 1
    [msg] = api.received("pagerduty")
    assert alert.id in msg["event"]["payload"]["custom_details"]["alert_id"]


def test_an_invalid_event_is_permanent_and_falls_back_without_the_routing_key(
        make_ctx, api, creds, caplog):
    (creds / "market-timers.pagerduty-routing-key").write_text("WRONG-routing-key\n")
    ctx = pd_ctx(make_ctx, api)
    with caplog.at_level(logging.DEBUG):
        raise_alert(ctx, kind="failed", job="signal", job_severity="critical")
    assert [m["service"] for m in api.received()] == ["telegram"]
    assert "pagerduty: rejected (400 Event object is invalid" in caplog.text
    assert "WRONG-routing-key" not in caplog.text


def test_a_summary_is_cut_to_1024_characters(make_ctx, api):
    ctx = pd_ctx(make_ctx, api)
    raise_alert(ctx, kind="failed", job="signal", job_severity="critical", title="x" * 5000,
                details={"journal": "j" * 200000})
    [msg] = api.received("pagerduty")  # the fake refuses a summary over 1024
    assert len(msg["text"]) == 1024 and msg["text"].endswith("…")
    text = msg["event"]["payload"]["custom_details"]["text"]
    assert len(text.encode()) <= 65536 and text.endswith("j" * 100)


def test_alert_test_triggers_and_resolves_so_nobody_stays_paged(make_ctx, api, capsys):
    ctx = pd_ctx(make_ctx, api)
    assert alert_test(ctx, "pagerduty") == 0
    assert [m["action"] for m in api.received("pagerduty")] == ["trigger", "resolve"]
    assert list(api.incidents.values()) == ["resolved"]
    assert "pagerduty: test message delivered" in capsys.readouterr().out
