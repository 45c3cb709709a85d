"""The seed's proof: four months of a live account's events, 158 naive alerts -> 7 that interrupt.

The stream (seed_stream.py) goes through the real spool, the `[events]` rules of the shipped
example config, the alert router and the outbox, with channels at a fake Telegram and Slack.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import date
from pathlib import Path

import pytest

from market_timers.alerts import digest
from market_timers.events import report
from market_timers.events.plan_lookup import PlanLookup
from market_timers.events.replay import replay
from market_timers.events.store import read_open, read_session
from market_timers.schedule import plan

from .seed_stream import CUTS, END, START, build


@pytest.fixture(scope="module")
def fires():
    import tomllib

    from .conftest import EXAMPLE, load_raw

    cfg = load_raw(tomllib.loads(EXAMPLE.read_text()), Path("/nonexistent"))
    return plan.plan_between(cfg, START, END)


@pytest.fixture(scope="module")
def stream(fires):
    return build(fires)


def schedule_of(fires) -> PlanLookup:
    return PlanLookup([(f.job, f.session.isoformat(), f.fire_utc) for f in fires])


def titles(api, service):
    return [m["text"].splitlines()[0] for m in api.received(service)]


def test_the_fixture_holds_the_seeds_facts(stream, fires):
    assert len({f.session for f in fires if f.job == "disconnect"}) == 85
    assert len(stream) == 158
    assert Counter(e["kind"] for e in stream) == {
        "disconnected": 92, "cancelled": 50, "heartbeat_lost": 7, "reconnected": 7, "rejected": 2}
    cuts = [e for e in stream if e["kind"] == "heartbeat_lost"]
    back = [e for e in stream if e["kind"] == "reconnected"]
    from market_timers.events.plan_lookup import parse_at

    durations = {parse_at(c["at"]).date(): round((parse_at(b["at"]) - parse_at(c["at"]))
                                                 .total_seconds()) for c, b in zip(cuts, back, strict=True)}
    assert durations == CUTS


def test_naive_rule_alerts_158_times(example, ctx_for, tmp_path, dirs, api, stream, fires):
    cfg = example(events=None, dedup_minutes=0)  # no rules: every event alerts (warning)
    replay(ctx_for(cfg), cfg.events, cfg.state_dir, stream, dirs, schedule_of(fires))
    assert len(api.received()) == 158
    assert len(api.received("slack")) == 158


def test_the_three_rules_leave_7_interrupting_alerts(example, ctx_for, dirs, api, stream, fires):
    cfg = example()
    ctx = ctx_for(cfg)
    replay(ctx, cfg.events, cfg.state_dir, stream, dirs, schedule_of(fires))

    telegram, slack = titles(api, "telegram"), titles(api, "slack")
    recoveries = [t for t in slack if t.startswith("[RESOLVED] connection real resolved after")]
    alerts = [t for t in telegram + slack if t not in recoveries]
    assert len(alerts) == 7, telegram + slack
    # The 2 rejections are critical (Telegram); the 5 cuts longer than 60 s are warnings (Slack),
    # sent when the minute passed, while the connection was still down.
    assert telegram == ["[CRITICAL] rejected P00005: paper: insufficient buying power",
                        "[CRITICAL] rejected R00007: real: insufficient buying power"]
    long_cuts = sorted(d for d in CUTS.values() if d > 60)
    assert [t for t in slack if "not resolved" in t] == [
        "[WARNING] connection real: not resolved after 60 s (heartbeat_lost, disconnected)"] * 5
    # ...and each of them is answered by a recovery naming its duration; nothing else was sent.
    recovered = sorted(int(re.search(r"after (\d+) s", t)[1]) for t in recoveries)
    assert recovered == long_cuts
    assert len(api.received()) == 7 + 5
    for m in api.received("slack"):
        if "not resolved" in m["text"]:
            stamp = re.search(r"opened at (\S+)", m["text"])[1]
            assert stamp[:10] in {d.isoformat() for d, s in CUTS.items() if s > 60}
    assert read_open(cfg.state_dir) == []
    assert list((tmp_path_of(cfg) / "spool" / "events").iterdir()) == []


def tmp_path_of(cfg):
    return cfg.state_dir.parent


def test_the_rest_is_in_the_digest_of_the_right_day(example, ctx_for, dirs, api, stream, fires):
    cfg = example()
    ctx = ctx_for(cfg)
    replay(ctx, cfg.events, cfg.state_dir, stream, dirs, schedule_of(fires))
    routed = Counter()
    for session in sorted({e["at"][:10] for e in stream}):
        text = digest.build(ctx, session, report.digest_lines)
        day = [e for e in stream if e["at"][:10] == session]
        # every event of the day is accounted for in that day's digest
        scheduled = [e for e in day if e["kind"] == "disconnected" and "end of session" in e["text"]]
        assert text.count("disconnected real: expected after disconnect") == len(scheduled) == 1
        for e in day:
            if e["kind"] == "cancelled":
                assert f"cancelled {e['key']}: limit order cancelled" in text
                routed["cancelled"] += 1
        d = date.fromisoformat(session)
        doc = read_session(cfg.state_dir, session)
        if d in CUTS:
            [inc] = doc["incidents"]
            assert inc["duration_sec"] == CUTS[d] and inc["count"] == 3
            assert inc["alerted"] is (CUTS[d] > 60)
            assert f"connection real: opened {inc['opened'][11:19]}Z" in text
            if CUTS[d] <= 60:
                assert f"connection real: resolved after {CUTS[d]} s (within interrupt_after" in text
            routed["cut"] += 1
        else:
            assert doc["incidents"] == []
        routed["scheduled"] += 1
    assert routed == {"scheduled": 85, "cancelled": 50, "cut": 7}
