"""An incident is the occurrence (job, session[, slot], reason): repeats fold only into the same
one, and a recovery resolves its own session's incident and older ones, never a newer session's
(issue 45, item 1)."""

from __future__ import annotations

import json

from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.delivery import flush

YESTERDAY, TODAY, TOMORROW = "2026-11-27", "2026-11-30", "2026-12-01"
TRY = "try-20261130T060900Z"


def texts(api) -> list[str]:
    return [m["text"] for m in api.received("telegram")]


def test_failures_after_a_recovered_try_each_reach_the_channel(make_ctx, api, clock, tmp_path):
    """Seen: a try failed at 06:09 and recovered, then two sessions failed at 06:14 and 06:15:
    no channel heard of them, the digest said "Alerts: (none) + 2 repeat(s) folded"."""
    ctx = make_ctx(repeat_minutes=0, dedup_minutes=30)
    raise_alert(ctx, kind="failed", job="j", session=YESTERDAY)
    clock.advance(minutes=4)
    raise_alert(ctx, kind="failed", job="j", session=TRY)
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=YESTERDAY)  # the rerun of yesterday's session
    clock.advance(minutes=4)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    raise_alert(ctx, kind="failed", job="j", session=TOMORROW)
    sent = texts(api)
    assert len(sent) == 5, sent
    for session in (YESTERDAY, TRY, TODAY, TOMORROW):
        assert sum(f"session: {session}" in t and "recovered" not in t for t in sent) == 1
    assert sum("recovered" in t for t in sent) == 1
    folded = [e for s in ctx.state.sessions() for e in ctx.state.events(s)
              if e["event"] == "deduplicated"]
    assert folded == []


def test_a_try_resolves_nothing(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    assert record_success(ctx, job="j", session=TRY) is None
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=TODAY)
    sent = texts(api)
    assert len(sent) == 2 and "recovered" in sent[1] and f"session: {TODAY}" in sent[1]


def test_two_sessions_failing_in_a_row_are_two_alerts(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0, dedup_minutes=30)
    first = raise_alert(ctx, kind="failed", job="j", session=YESTERDAY)
    clock.advance(minutes=1)
    second = raise_alert(ctx, kind="failed", job="j", session=TODAY)
    assert second is not None and second.id != first.id
    assert len(texts(api)) == 2


def test_the_same_session_failing_twice_in_the_window_is_folded(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0, dedup_minutes=30)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=5)
    assert raise_alert(ctx, kind="failed", job="j", session=TODAY) is None
    assert len(texts(api)) == 1
    assert [e["event"] for e in ctx.state.events(TODAY)].count("deduplicated") == 1


def test_an_older_sessions_success_does_not_resolve_a_newer_failure(make_ctx, api, clock):
    """Seen: "recovered: session <yesterday> ran fine" while today's session was still failed."""
    ctx = make_ctx(repeat_minutes=15, escalate_after=0)
    today = raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    assert record_success(ctx, job="j", session=YESTERDAY) is None
    assert len(texts(api)) == 1
    clock.advance(minutes=15)
    flush(ctx)  # today's critical is still open: it repeats
    assert "(repeat 1)" in texts(api)[-1] and today.id in texts(api)[-1]
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=TODAY)
    assert "recovered" in texts(api)[-1] and f"alert {today.id} is resolved" in texts(api)[-1]


def test_a_newer_success_resolves_the_older_sessions_too(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=15, escalate_after=0)
    raise_alert(ctx, kind="failed", job="j", session=YESTERDAY)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=TOMORROW)
    assert "recovered" in texts(api)[-1]
    for _ in range(3):
        clock.advance(minutes=15)
        flush(ctx)
    assert len(texts(api)) == 3  # two failures, one recovery, no repeat after it
    assert ctx.escalations.active() == []


def test_an_older_success_resolves_its_own_incident_only(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0)
    raise_alert(ctx, kind="failed", job="j", session=YESTERDAY)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=YESTERDAY)
    assert "recovered" in texts(api)[-1] and f"still failed: {TODAY}" in texts(api)[-1]
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=TODAY)
    assert len(texts(api)) == 4 and "recovered" in texts(api)[-1]


def test_a_same_session_success_after_failure_recovers(make_ctx, api, clock):
    ctx = make_ctx(repeat_minutes=0)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    assert record_success(ctx, job="j", session=TODAY) is not None
    clock.advance(minutes=1)
    assert record_success(ctx, job="j", session=TODAY) is None  # nothing open any more
    assert len(texts(api)) == 2


def test_state_written_by_the_previous_version_still_reads(make_ctx, api, clock, tmp_path):
    """A jobs/<job>.json and dedup entries of the per-job format: no crash; the old open failure
    is still resolved by its session's success."""
    ctx = make_ctx(repeat_minutes=0)
    jobs = ctx.state.dir / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    (jobs / "j.json").write_text(json.dumps({
        "outcome": "failed", "at": "2026-11-30T14:00:00Z", "session": TODAY,
        "alert_id": "1130-0badc0de", "chain": ["telegram"], "severity": "critical"}))
    ctx.state.dedup_record("failed:j", "1130-0badc0de", clock(), 30)
    assert raise_alert(ctx, kind="failed", job="j", session=TOMORROW) is not None
    clock.advance(minutes=1)
    record_success(ctx, job="j", session=TODAY)
    assert "alert 1130-0badc0de is resolved" in texts(api)[-1]


def test_a_recovery_is_not_critical(make_ctx, api, clock):
    """Seen: a recovery labelled [CRITICAL]."""
    ctx = make_ctx(repeat_minutes=0)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    clock.advance(minutes=1)
    recovery = record_success(ctx, job="j", session=TODAY)
    assert recovery.severity == "info"
    assert texts(api)[-1].startswith("[RESOLVED] ") and "CRITICAL" not in texts(api)[-1]
    assert [m["service"] for m in api.received()].count("telegram") == 2  # where it failed


def test_every_alert_names_the_host_and_in_a_cluster_the_node(make_ctx, api):
    import os

    ctx = make_ctx(repeat_minutes=0)
    raise_alert(ctx, kind="failed", job="j", session=TODAY)
    assert f"host: {os.uname().nodename}\n" in texts(api)[-1]
    ctx.node = "ny4-b"
    raise_alert(ctx, kind="failed", job="j", session=TOMORROW)
    assert f"host: {os.uname().nodename} (cluster node ny4-b)\n" in texts(api)[-1]
