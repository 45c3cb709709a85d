"""A flood of spooled events: saves are batched, alerts leave while the rest is still spooled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

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
