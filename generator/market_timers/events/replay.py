"""Replay a recorded event stream through the real spool, rules, router and outbox.

Each event is spooled exactly as `market-timers event` would spool it, then a processor pass runs
at the event's own instant (the injected clock): thresholds that pass between two events alert
at their own instant. Used by the tests (tests/events/test_seed_replay.py: four months of a live
account's events) and by anyone who wants to see what a rules change would have sent over a past
period:

    from market_timers.events.replay import replay
    replay(ctx, config.events, state_dir, stream, dirs, schedule)
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from market_timers.config.events import EventsConfig
from market_timers.events import spool
from market_timers.events.plan_lookup import PlanLookup, parse_at
from market_timers.events.process import drain


def replay(ctx, ecfg: EventsConfig, state_dir, stream: Iterable[dict], dirs: list[str],
           schedule: PlanLookup | None = None, end: datetime | None = None) -> list[tuple[str, str]]:
    """Spool and process each event in order; return every (outcome, what) of the engine."""
    outcomes: list[tuple[str, str]] = []
    last = None
    for event in stream:
        fields = {k: event.get(k) for k in ("key", "severity", "text", "job", "session", "value")
                  if event.get(k) not in (None, "")}
        at = parse_at(event["at"])
        spool.write(spool.make_event(event["kind"], at=at.timestamp(), **fields), dirs)
        outcomes += drain(ctx, ecfg, state_dir, dirs, at, schedule).outcomes
        last = at
    if end or last:
        outcomes += drain(ctx, ecfg, state_dir, dirs, end or last, schedule).outcomes
    return outcomes
