"""Routing, channel answers (200/400/429/5xx/down) and fallback, seen from the fake servers and the spool."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from market_timers.alerts.api import raise_alert
from market_timers.alerts.commands import outbox_list, outbox_summary
from market_timers.alerts.delivery import flush
from market_timers.alerts.model import UNDELIVERABLE, Alert
from market_timers.config.alerts import parse_alerts
from market_timers.schema.problems import Problems


def spooled(ctx) -> list[Alert]:
    return ctx.outbox.load_all()


def test_critical_failure_goes_to_telegram_and_leaves_spool_empty(make_ctx, api):
    ctx = make_ctx()
    alert = raise_alert(ctx, kind="failed", job="close-report", session="2026-11-30",
                        details={"status": "3"})
    [msg] = api.received()
    assert msg["service"] == "telegram" and msg["chat_id"] == "-1001"
    assert "close-report failed with exit status 3" in msg["text"]
    assert alert.id in msg["text"]
    assert spooled(ctx) == []


def test_warning_overlap_goes_to_slack(make_ctx, api):
    ctx = make_ctx()
    raise_alert(ctx, kind="overlap-skipped", job="rebalance", session="2026-11-30")
    [msg] = api.received()
    assert msg["service"] == "slack" and "skipped" in msg["text"]


def test_info_severity_goes_to_digest_not_to_any_channel(make_ctx, api):
    ctx = make_ctx(kind_severity={"overlap-skipped": "info"})
    assert raise_alert(ctx, kind="overlap-skipped", job="rebalance", session="2026-11-30") is None
    assert api.received() == []
    assert spooled(ctx) == []
    assert [e["event"] for e in ctx.state.events("2026-11-30")] == ["digest"]


def test_telegram_429_waits_for_retry_after_then_delivers(make_ctx, api, clock):
    ctx = make_ctx()
    api.fail_next("telegram", 429, retry_after=37)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    [waiting] = spooled(ctx)
    assert waiting.not_before == "2026-11-30T14:31:42Z"  # now + retry_after
    clock.advance(seconds=36)
    assert flush(ctx)["waiting"] == 1
    assert api.received() == []
    clock.advance(seconds=1)
    assert flush(ctx)["delivered"] == 1
    [msg] = api.received("telegram")
    assert waiting.id in msg["text"]
    assert spooled(ctx) == []


def test_429_blocks_the_whole_channel_for_other_alerts(make_ctx, api, clock):
    ctx = make_ctx()
    api.fail_next("telegram", 429, retry_after=60)
    raise_alert(ctx, kind="failed", job="a", session="2026-11-30")
    raise_alert(ctx, kind="failed", job="b", session="2026-11-30")
    assert api.received() == []
    assert len(spooled(ctx)) == 2
    clock.advance(seconds=61)
    flush(ctx)
    assert len(api.received("telegram")) == 2


def test_telegram_400_is_not_retried_and_falls_back_to_slack(make_ctx, api):
    ctx = make_ctx()
    api.fail_next("telegram", 400, description="Bad Request: chat not found", times=5)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    assert api.received("telegram") == []
    [msg] = api.received("slack")
    assert "j failed" in msg["text"]
    assert spooled(ctx) == []


def test_5xx_is_retried_with_backoff_then_falls_back_after_k_attempts(make_ctx, api, clock):
    ctx = make_ctx(fallback_after_attempts=3)
    api.fail_next("telegram", 502, times=10)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")  # attempt 1
    [a] = spooled(ctx)
    assert a.attempts == 1 and a.channel == "telegram" and "502" in a.last_error
    flush(ctx)  # not before the backoff: no new attempt
    assert spooled(ctx)[0].attempts == 1
    clock.advance(seconds=30)
    flush(ctx)  # attempt 2
    clock.advance(seconds=60)
    flush(ctx)  # attempt 3 -> gives up telegram, slack delivers in the same pass
    [msg] = api.received()
    assert msg["service"] == "slack"
    assert spooled(ctx) == []


def test_channel_down_falls_back_after_t_minutes(make_ctx, api, clock, creds):
    ctx = make_ctx(telegram={"chat_id": "1", "api_base": "http://127.0.0.1:9"},  # nothing listens
                   fallback_after_attempts=100, fallback_after_minutes=5)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    [a] = spooled(ctx)
    assert "network error" in a.last_error
    for _ in range(4):
        clock.advance(minutes=1, seconds=15)
        flush(ctx)
    assert [m["service"] for m in api.received()] == ["slack"]
    assert spooled(ctx) == []


def test_alert_no_channel_can_deliver_stays_visible_as_undeliverable(make_ctx, api, clock, capsys):
    ctx = make_ctx()
    api.fail_next("telegram", 403, description="Forbidden: bot was blocked by the user")
    api.fail_next("slack", 404, description="no_service")
    alert = raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    [a] = spooled(ctx)
    assert a.state == UNDELIVERABLE
    assert len(a.errors) == 2 and "bot was blocked" in a.errors[0] and "no_service" in a.errors[1]
    assert outbox_summary(ctx) == {"pending": 0, "undeliverable": 1, "pending_ids": [],
                                   "undeliverable_ids": [alert.id], "oldest_pending_utc": None}
    outbox_list(ctx, as_json=True)
    [row] = json.loads(capsys.readouterr().out)
    assert row["id"] == alert.id and row["state"] == "undeliverable"
    # retried from the first channel later; delivered once the channel is back
    clock.advance(minutes=31)
    flush(ctx)
    assert [m["service"] for m in api.received()] == ["telegram"]
    assert spooled(ctx) == []


def test_long_journal_excerpt_is_cut_to_telegram_limit_keeping_the_last_lines(make_ctx, api):
    ctx = make_ctx()
    journal = "\n".join(f"line {i} " + "x" * 200 for i in range(100)) + "\nTraceback: the end"
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30", details={"journal": journal})
    [msg] = api.received("telegram")  # the fake answers 400 above 4096: delivered means it fits
    assert len(msg["text"]) <= 4096
    assert msg["text"].endswith("Traceback: the end")
    assert "j failed" in msg["text"]


def test_slack_429_retry_after_header_is_honoured(make_ctx, api, clock):
    ctx = make_ctx(routes={"critical": "slack"})
    api.fail_next("slack", 429, retry_after=20)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    assert spooled(ctx)[0].not_before == "2026-11-30T14:31:25Z"
    clock.advance(seconds=19)
    flush(ctx)
    assert api.received() == []
    clock.advance(seconds=1)
    flush(ctx)
    assert [m["service"] for m in api.received()] == ["slack"]


def test_generic_webhook_receives_the_alert_as_json(make_ctx, api):
    ctx = make_ctx(webhook={}, routes={"critical": "webhook"})
    alert = raise_alert(ctx, kind="missed", job="open-check", session="2026-11-30")
    [msg] = api.received("webhook")
    assert msg["payload"]["id"] == alert.id
    assert msg["payload"]["kind"] == "missed" and msg["payload"]["severity"] == "critical"


def test_missing_credential_is_permanent_and_falls_back(make_ctx, api, creds):
    (creds / "market-timers.telegram-token").unlink()
    ctx = make_ctx()
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    assert [m["service"] for m in api.received()] == ["slack"]


def test_a_far_not_before_in_channels_json_is_cut_to_max_backoff(make_ctx, api, clock, caplog):
    """A channels.json (or a 429) naming year 9999 must not silence the channel: it is obeyed
    for at most [alerts] max_backoff_minutes (default 60)."""
    ctx = make_ctx(fallback_after_minutes=1000)  # it stays on telegram all along
    for name in ("telegram", "slack"):
        ctx.state.set_channel_not_before(name, datetime(9999, 12, 31, tzinfo=UTC))
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    assert api.received() == []
    [waiting] = spooled(ctx)
    assert waiting.not_before == "2026-11-30T15:31:05Z"  # now + 60 min, not 9999
    assert "beyond max_backoff_minutes" in caplog.text
    clock.advance(minutes=59)
    assert flush(ctx)["waiting"] == 1
    clock.advance(minutes=2)
    assert flush(ctx)["delivered"] == 1
    assert len(api.received("telegram")) == 1


def test_a_429_asking_for_a_year_is_obeyed_for_max_backoff_minutes(make_ctx, api, clock):
    ctx = make_ctx(max_backoff_minutes=5)
    api.fail_next("telegram", 429, retry_after=365 * 86400)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    [waiting] = spooled(ctx)
    assert waiting.not_before == "2026-11-30T14:36:05Z"
    clock.advance(minutes=5)
    assert flush(ctx)["delivered"] == 1


def test_max_backoff_minutes_must_be_at_least_one():
    problems = Problems()
    parse_alerts({"max_backoff_minutes": 0}, problems)
    assert any("alerts.max_backoff_minutes" in line and "must be a number >= 1" in line
               for line in problems.lines()), problems.lines()


def test_the_outbox_flush_sends_criticals_first(make_ctx, api, clock):
    """Issue 45: a backlog of warnings in the outbox does not hold back a later critical."""
    from market_timers.alerts.delivery import flush
    from market_timers.alerts.model import Alert, make_id
    from market_timers.contracts.instants import iso

    ctx = make_ctx(repeat_minutes=0)
    for i in range(5):
        clock.advance(seconds=1)
        ctx.outbox.put(Alert(id=make_id("event", f"w{i}", clock()), kind="event",
                             severity="warning", key=f"w{i}", title=f"warning {i}",
                             created=iso(clock()), chain=["telegram"]))
    clock.advance(seconds=1)
    ctx.outbox.put(Alert(id=make_id("event", "c", clock()), kind="event", severity="critical",
                         key="c", title="the critical one", created=iso(clock()),
                         chain=["telegram"]))
    flush(ctx)
    sent = [m["text"] for m in api.received("telegram")]
    assert len(sent) == 6 and "the critical one" in sent[0]
