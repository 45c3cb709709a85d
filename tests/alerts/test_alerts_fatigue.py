"""Alert fatigue rules: dedup window, critical repeats until ack or recovery, escalation."""

from __future__ import annotations

import pytest

from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.commands import ack
from market_timers.alerts.delivery import flush

S = "2026-11-30"


def test_burst_of_same_key_inside_window_is_counted_not_resent(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0)
    first = raise_alert(ctx, kind="failed", job="j", session=S)
    for _ in range(4):
        clock.advance(minutes=5)
        assert raise_alert(ctx, kind="failed", job="j", session=S) is None
    assert len(api.received()) == 1
    events = [e["event"] for e in ctx.state.events(S)]
    assert events.count("deduplicated") == 4
    assert ctx.state.dedup_hit(f"failed:j:{S}", clock(), 30) == first.id  # still in the window


def test_same_key_after_the_window_alerts_again(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0, dedup_minutes=30)
    raise_alert(ctx, kind="failed", job="j", session=S)
    clock.advance(minutes=30)
    raise_alert(ctx, kind="failed", job="j", session=S)
    assert len(api.received("telegram")) == 2


def test_different_jobs_are_different_incidents(make_ctx, api):
    ctx = make_ctx()
    raise_alert(ctx, kind="failed", job="a", session=S)
    raise_alert(ctx, kind="failed", job="b", session=S)
    assert len(api.received("telegram")) == 2


def test_unacknowledged_critical_repeats_every_n_minutes_with_same_id(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=15, escalate_after=0)
    alert = raise_alert(ctx, kind="failed", job="j", session=S)
    clock.advance(minutes=14)
    flush(ctx)
    assert len(api.received()) == 1
    clock.advance(minutes=1)
    flush(ctx)
    clock.advance(minutes=15)
    flush(ctx)
    texts = [m["text"] for m in api.received("telegram")]
    assert len(texts) == 3
    assert "(repeat 1)" in texts[1] and "(repeat 2)" in texts[2]
    assert all(alert.id in t for t in texts)


def test_ack_stops_repeats(make_ctx, api, clock, capsys):
    ctx = make_ctx(repeat_minutes=15)
    alert = raise_alert(ctx, kind="failed", job="j", session=S)
    assert ack(ctx, alert.id) == 0
    for _ in range(4):
        clock.advance(minutes=15)
        flush(ctx)
    assert len(api.received()) == 1
    assert ack(ctx, alert.id) == 2  # already acknowledged: nothing open, refused
    assert "no open critical alert" in capsys.readouterr().err


def test_recovery_stops_repeats(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=15)
    raise_alert(ctx, kind="failed", job="j", session=S)
    clock.advance(minutes=10)
    record_success(ctx, job="j", session=S)
    for _ in range(4):
        clock.advance(minutes=15)
        flush(ctx)
    texts = [m["text"] for m in api.received("telegram")]
    assert len(texts) == 2 and "recovered" in texts[1]


def test_escalation_channel_gets_it_once_after_m_repeats(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=15, escalate_after=2, escalation_channel="slack")
    raise_alert(ctx, kind="failed", job="j", session=S)
    for _ in range(4):
        clock.advance(minutes=15)
        flush(ctx)
    assert len(api.received("telegram")) == 5  # first notice + 4 repeats
    [esc] = api.received("slack")
    assert esc["text"].startswith("[CRITICAL] ESCALATED: j failed")


def test_no_repeat_piles_up_while_the_first_notice_is_undelivered(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=15, fallback_after_attempts=100, fallback_after_minutes=600)
    api.fail_next("telegram", 503, times=100)
    raise_alert(ctx, kind="failed", job="j", session=S)
    for _ in range(4):
        clock.advance(minutes=15)
        flush(ctx)
    assert [a.spool_name for a in ctx.outbox.load_all()] == [ctx.outbox.load_all()[0].id]


def test_warning_does_not_repeat(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=15)
    raise_alert(ctx, kind="overlap-skipped", job="j", session=S)
    clock.advance(minutes=60)
    flush(ctx)
    assert len(api.received()) == 1


def test_recovery_after_a_folded_burst_names_the_alert_that_was_sent(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0)
    first = raise_alert(ctx, kind="failed", job="j", session=S)
    clock.advance(minutes=2)
    raise_alert(ctx, kind="failed", job="j", session=S)
    clock.advance(minutes=2)
    record_success(ctx, job="j", session=S)
    texts = [m["text"] for m in api.received("telegram")]
    assert len(texts) == 2 and f"alert {first.id} is resolved" in texts[1]


@pytest.mark.parametrize("bad", ["../../plan", "../plan", "/etc/passwd", "1130-0123ABCD",
                                 "1130-0123abcd/..", "", "1130-0123abcd.r1", "x" * 300])
def test_ack_refuses_a_malformed_id_and_deletes_nothing(make_ctx, tmp_path, capsys, bad):
    """`ack ../../plan` deleted <state_dir>/plan.json and printed "acknowledged"."""
    ctx = make_ctx()
    plan = tmp_path / "state" / "plan.json"
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text("{}")
    assert ack(ctx, bad) == 2
    assert plan.exists()
    assert "acknowledged" not in capsys.readouterr().out


def test_an_incident_on_every_channel_repeats_where_its_last_notice_went_out(make_ctx, api,
                                                                              clock):
    """One id on every channel (a halt's): a channel that is down holds back its own repeats
    only, not the others'."""
    ctx = make_ctx(repeat_minutes=15, escalate_after=0)
    api.fail_next("telegram", 500, times=100)
    halt = raise_alert(ctx, kind="halt", key="halt:orders::x:", severity="critical",
                       title="HALT: order jobs", every_channel=True)
    assert halt.fanout == ["telegram", "slack"]
    clock.advance(minutes=15)
    flush(ctx)
    slack = [m["text"] for m in api.received("slack")]
    assert len(slack) == 2 and "(repeat 1)" in slack[1] and halt.id in slack[1]
