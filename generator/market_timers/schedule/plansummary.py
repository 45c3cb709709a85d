"""`market-timers plan --summary`: one line per job (and calendar), in the day's order: its rule,
its instants in exchange time (the usual one, then each other with its session: an early close),
its next fire and how many fires the window holds. `plan` is the line per fire."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from market_timers.schedule.plan import Fire
from market_timers.schedule.planview import EMPTY, _align, _what

HEADER = ("JOB", "CALENDAR", "RULE", "EXCHANGE TIME", "NEXT (UTC)", "COUNT")
SHOWN_OTHERS = 2  # other instants named with their session; beyond, only counted


def _local(f: Fire) -> str:
    """"15:45 EST", or a periodic fire's window "09:35-15:40 EST"."""
    zone = f.local().tzinfo
    first = f.fire_utc.astimezone(zone)
    if not f.is_periodic or f.last_utc == f.fire_utc:
        return f"{first:%H:%M} {first.tzname()}"
    last = f.last_utc.astimezone(zone)
    return f"{first:%H:%M}-{last:%H:%M} {last.tzname()}"


def _times(fires: list[Fire]) -> str:
    seen = Counter(_local(f) for f in fires)
    usual = seen.most_common(1)[0][0]
    others = [f for f in fires if _local(f) != usual]
    text = [usual, *(f"{_local(f)} on {f.session:%a %Y-%m-%d}" for f in others[:SHOWN_OTHERS])]
    if len(others) > SHOWN_OTHERS:
        text.append(f"{len(others) - SHOWN_OTHERS} more")
    return ", ".join(text)


def _next(fires: list[Fire], now: datetime | None) -> str:
    instants = (t for f in fires for t in (f.slots if f.is_periodic else (f.fire_utc,))
                if now is None or t >= now)
    t = min(instants, default=None)
    return f"{t:%a %Y-%m-%d %H:%M}Z" if t is not None else "-"


def _rule(fires: list[Fire]) -> str:
    whys = sorted({f.why for f in fires if f.why})
    rule = _what(fires[0])
    if whys:  # a session rule chose these sessions
        rule += f" ({whys[0]}{', ...' if len(whys) > 1 else ''})"
    return rule


def _count(fires: list[Fire]) -> str:
    if fires[0].is_periodic:
        return f"{len(fires)} sessions, {sum(len(f.slots) for f in fires)} slots"
    return str(len(fires))


def summary(fires: list[Fire], now: datetime | None = None,
            depths: dict[str, int] | None = None) -> str:
    """The summary of `fires`; `now`: the next fire is the first at or after it; `depths`
    (job -> its depth in its `requires` chain): at one time of day, an upstream first."""
    if not fires:
        return EMPTY
    groups: dict[tuple[str, str], list[Fire]] = {}
    for f in fires:
        groups.setdefault((f.job, f.calendar), []).append(f)
    depths = depths or {}

    def order(key):
        usual = Counter(_local(f) for f in groups[key]).most_common(1)[0][0]
        return (usual[:5], depths.get(key[0], 0), key)

    rows = [HEADER]
    for key in sorted(groups, key=order):
        jobs = sorted(groups[key], key=lambda f: f.fire_utc)
        rows.append((key[0], key[1], _rule(jobs), _times(jobs), _next(jobs, now),
                     _count(jobs)))
    return _align(rows)
