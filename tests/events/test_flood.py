"""A flood of spooled events: saves are batched, alerts leave while the rest is still spooled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_timers.alerts import delivery
from market_timers.events import process, spool
from market_timers.events.store import Store

T0 = datetime(2025, 11, 13, 15, 0, tzinfo=UTC)


def _spool(dirs, n, kind="order_note", **fields):
    for i in range(n):
        spool.write(spool.make_event(kind, key=f"R{i}", at=(T0 + timedelta(
            milliseconds=i)).timestamp(), **fields), dirs)


def test_state_saves_are_one_per_batch_and_delivery_starts_before_the_pass_ends(
        example, ctx_for, dirs, monkeypatch):
    cfg = example(events="example")
    ctx = ctx_for(cfg)
    n = 2 * process.BATCH + 10
    _spool(dirs, n, severity="warning")
    saves, left_at_delivery = [], []
    real_save, real_try = Store.save, delivery.try_now
    monkeypatch.setattr(Store, "save", lambda self: (saves.append(1), real_save(self)))

    def recording_try(c, alert):
        left_at_delivery.append(len(list(Path(dirs[0]).iterdir())))
        return real_try(c, alert)

    monkeypatch.setattr(delivery, "try_now", recording_try)
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, T0 + timedelta(seconds=5))
    assert list(Path(dirs[0]).iterdir()) == []
    assert len(saves) == 3 + 1  # one per batch of BATCH events, and the final tick's
    assert left_at_delivery and left_at_delivery[0] > 0  # the first alert left mid-pass


def test_a_critical_event_is_routed_before_the_flood_ahead_of_it(example, ctx_for, dirs,
                                                                  monkeypatch):
    cfg = example(events="example")
    ctx = ctx_for(cfg)
    _spool(dirs, 50, kind="chatter", severity="info")
    spool.write(spool.make_event("kill_switch", key="all", severity="critical",
                                 at=(T0 + timedelta(seconds=1)).timestamp()), dirs)
    engine = process.drain(ctx, cfg.events, cfg.state_dir, dirs, T0 + timedelta(seconds=5))
    assert engine.outcomes[0] == ("alert", "kill_switch all")


def test_one_source_sends_at_most_the_bound_per_window_then_one_summary(example, ctx_for, dirs,
                                                                        api):
    """Seen: a job's 1,500 events were 1,500 messages, and the gateway's real incident alert went
    out after them."""
    from market_timers.events import flood

    cfg = example(events="example")
    ctx = ctx_for(cfg)
    bound = flood.MESSAGES_PER_WINDOW
    _spool(dirs, 3 * bound, severity="warning", job="chatty")
    spool.write(spool.make_event("order_note", key="other", severity="warning", job="quiet",
                                 at=(T0 + timedelta(seconds=1)).timestamp()), dirs)
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, T0 + timedelta(seconds=5))
    sent = [m["text"] for m in api.received("slack")]
    assert sum("from chatty" in t for t in sent) == bound
    assert sum("from quiet" in t for t in sent) == 1  # the bound is per source
    assert not any("held back" in t for t in sent)  # the window is still going
    later = T0 + flood.WINDOW + timedelta(minutes=1)
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, later)
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, later + timedelta(minutes=1))
    [summary] = [m["text"] for m in api.received("slack") if "held back" in m["text"]]
    assert f"chatty: {2 * bound} more event(s) held back" in summary
    assert "order_note x" + str(2 * bound) in summary


def test_a_critical_leaves_first_whatever_was_spooled_before_it(example, ctx_for, dirs,
                                                                 monkeypatch):
    cfg = example(events={"default_severity": "warning", "incident": [
        {"name": "gateway", "open": ["gw_down"], "close": ["gw_up"], "interrupt_after": "0s",
         "severity": "critical"}]})
    ctx = ctx_for(cfg)
    for i in range(15):
        spool.write(spool.make_event("order_note", key=f"N{i}", job=f"j{i}", at=(
            T0 + timedelta(milliseconds=i)).timestamp()), dirs)
    spool.write(spool.make_event("gw_down", key="ny4", at=(T0 + timedelta(seconds=1))
                                 .timestamp()), dirs)
    order = []
    real_try = delivery.try_now
    monkeypatch.setattr(delivery, "try_now", lambda c, a: (order.append(a.severity),
                                                           real_try(c, a))[1])
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, T0 + timedelta(seconds=5))
    assert order[0] == "critical" and order.count("warning") == 15


def test_the_bound_and_its_window_are_the_configs(example, ctx_for, dirs, api):
    """[events] flood_limit and flood_window (issue 45): 3 messages per 1 min here."""
    cfg = example(events={"flood_limit": 3, "flood_window": "1min"})
    ctx = ctx_for(cfg)
    _spool(dirs, 10, severity="warning", job="chatty")
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, T0 + timedelta(seconds=5))
    assert sum("from chatty" in m["text"] for m in api.received("slack")) == 3
    later = T0 + timedelta(minutes=2)
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, later)
    process.drain(ctx, cfg.events, cfg.state_dir, dirs, later + timedelta(seconds=30))
    [summary] = [m["text"] for m in api.received("slack") if "held back" in m["text"]]
    assert "chatty: 7 more event(s) held back" in summary
    assert "at most 3 messages per source, severity and 1 min" in summary


def test_without_the_keys_the_bound_is_20_per_5_minutes(example):
    cfg = example(events={})
    assert (cfg.events.flood_limit, cfg.events.flood_window) == (20, 300)


@pytest.mark.parametrize(("events", "key", "message"), [
    ({"flood_limit": 0}, "events.flood_limit", "a whole number >= 1"),
    ({"flood_limit": "20"}, "events.flood_limit", "a whole number >= 1"),
    ({"flood_window": "5"}, "events.flood_window", "duration"),
    ({"flood_window": "2d"}, "events.flood_window", ""),
])
def test_a_bad_bound_names_the_file_the_key_and_the_value(example, events, key, message):
    from market_timers.schema.problems import ConfigError

    with pytest.raises(ConfigError) as e:
        example(events=events)
    lines = e.value.problems.lines()
    value = next(iter(events.values()))
    assert any(f": {key}: " in line and message in line and repr(value) in line
               for line in lines), lines
