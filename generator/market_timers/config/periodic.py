"""Periodic jobs: a job that runs `every` period inside a window of each session.

    every = "1min"            # the period: 1-30 s dividing a minute, 1-30 min dividing an hour,
                              # or 1-12 h dividing a day (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30...)
    from = "open+5min"        # window start: open | close, with a signed offset (default "open")
    until = "close-10min"     # window end, inclusive of a slot exactly at it (default "close")
    during_break = false      # no slot strictly between break_start and break_end (default)
    outside_session = false   # the window is clipped to open..close (default)
    stall_after = "5min"      # critical when no slot has started for this long (default 5 periods)

Slots are aligned to the window start: start, start + every, ... up to the end. Everything is
computed in UTC from the session's own open/close (exchange_calendars), so early closes, late opens,
overnight sessions and DST follow from the calendar. A session whose window is empty has no slot.
The window is clipped to the session's open..close (an offset that always reaches outside it,
such as "open-30min", is refused unless outside_session = true), and a slot belongs to one session
only: a session's slots stop before the next session's first slot (schedule/periodic.py).

Why the period must divide a minute, an hour or a day: the slots are then on the same seconds (or
minutes) of every minute (hour) of the window, so one timer needs a handful of `OnCalendar=` lines
per session (three for a whole NYSE day at 1 min), and `plan` reads like a clock ("every 5 min at
:35, :40..."). An odd period such as 7 s or 90 s would still be exact but needs dozens of lines.

The keys are declared and checked here (KEYS: config/jobs.py's [[job]] Table holds them and calls
parse_periodic); the slots of a session and their
OnCalendar= lines are schedule/periodic.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from market_timers.schema.durations import format_duration, parse_duration, parse_offset
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import flag

_EDGE = re.compile(r"^\s*(open|close)\s*(?:([+-].*))?\Z")
ALLOWED_PERIODS = sorted({*(s for s in range(1, 61) if 60 % s == 0),
                          *(60 * m for m in range(1, 61) if 60 % m == 0),
                          *(3600 * h for h in range(1, 25) if 24 % h == 0 and h <= 12)})
DEFAULT_STALL_PERIODS = 5


@dataclass(frozen=True)
class Periodic:
    every: int  # seconds
    start_event: str = "open"
    start_offset: int = 0
    end_event: str = "close"
    end_offset: int = 0
    during_break: bool = False
    stall_after: int = 0  # seconds
    outside_session: bool = False  # the window is not clipped to open..close


def describe(p: Periodic) -> str:
    """`every 1min from open+5min until close-10min`."""
    def edge(event: str, offset: int) -> str:
        if not offset:
            return event
        return f"{event}{'+' if offset > 0 else '-'}{format_duration(abs(offset))}"

    return (f"every {format_duration(p.every)} from {edge(p.start_event, p.start_offset)} until "
            f"{edge(p.end_event, p.end_offset)}")


def _edge(value: Any) -> tuple[str, int]:
    """`from` / `until`: open | close with an optional signed offset."""
    m = _EDGE.match(value) if isinstance(value, str) else None
    if not m:
        raise Bad('must be "open" or "close" with an optional signed offset, such as '
                  '"open+5min" or "close-10min"')
    try:
        offset = parse_offset(m.group(2)) if m.group(2) else 0
    except ValueError as e:
        raise Bad(f"the offset: {e}") from None
    return m.group(1), offset


def _period(value: Any) -> int:
    return parse_duration(value, 12 * 3600, "the longest period is 12h")


# The keys a [[job]] table has for a periodic job (config/jobs.py puts them in its Table).
KEYS = (
    Key("every", _period, None, "the period: a job that runs every period inside a window"),
    Key("from", _edge, ("open", 0), "the window's start: open or close with a signed offset"),
    Key("until", _edge, ("close", 0), "the window's end, inclusive (same form)"),
    Key("during_break", flag, False, "slots also strictly between break_start and break_end"),
    Key("outside_session", flag, False, "the window may reach before the open or after the "
        "close (default: clipped to the session)"),
    Key("stall_after", lambda v: parse_duration(v, 24 * 3600), None,
        "critical when no slot has started for this long (default five periods)"),
)
PERIODIC_KEYS = {k.name for k in KEYS}
_TABLE = Table(KEYS)


def parse_periodic(t: dict, path: str, problems) -> dict | None:
    """The periodic part of a [[job]] table: None when it has no periodic key.

    Returns the Job keyword arguments (event/offset = the window start, periodic=Periodic), or {}
    after adding every problem to `problems`, naming the key and the value.
    """
    present = sorted(PERIODIC_KEYS & set(t))
    if not present:
        return None
    if "every" not in t:
        for key in present:
            problems.add(f"{path}.{key}", "only for a periodic job: set `every` too (e.g. "
                         'every = "1min")', t[key])
        return {}
    for key in ("event", "offset", "at"):
        if key in t:
            problems.add(f"{path}.{key}", "a periodic job (`every`) runs inside the window "
                         "`from`..`until` of each session; remove this key (use from = "
                         '"close-15min" for a window tied to the close)', t[key])
    before = len(problems.items)  # from here every problem makes the job unusable
    every = _every(t, path, problems)
    start = _TABLE.check("from", t, path, problems)
    end = _TABLE.check("until", t, path, problems)
    if start is not None and end is not None and start[0] == end[0] and end[1] < start[1]:
        problems.add(f"{path}.until", f"the window ends before it starts (from = "
                     f"{t.get('from', 'open')!r}): no slot would ever run", t.get("until"))
    during_break = _TABLE.check("during_break", t, path, problems)
    outside = _TABLE.check("outside_session", t, path, problems)
    if not outside:
        for key, edge in (("from", start), ("until", end)):
            _check_inside(t, path, key, edge, problems)
    stall_after = _stall_after(t, path, every, problems)
    _check_grace(t, path, every, problems)
    if len(problems.items) != before or every is None or start is None or end is None:
        return {}  # problems reported; {} (not None) keeps "event is required" quiet
    periodic = Periodic(every=every, start_event=start[0], start_offset=start[1],
                        end_event=end[0], end_offset=end[1], during_break=during_break,
                        stall_after=stall_after or DEFAULT_STALL_PERIODS * every,
                        outside_session=bool(outside))
    kw: dict[str, Any] = {"event": start[0], "offset": start[1], "periodic": periodic}
    if "grace" not in t:
        # misfire grace: half a period, at most the usual 2 min (a later start is refused).
        kw["grace_default"] = max(1, min(120, every // 2))
    return kw


def _check_inside(t: dict, path: str, key: str, edge: tuple[str, int] | None, problems) -> None:
    """`open` minus something or `close` plus something is outside every session: refused
    (clipping it would silently drop what the key asks for) unless outside_session = true."""
    if edge is None:
        return
    event, offset = edge
    if (event == "open" and offset < 0) or (event == "close" and offset > 0):
        where = "before the open" if event == "open" else "after the close"
        problems.add(f"{path}.{key}", f"is {where}: a periodic job's slots run inside the "
                     "session (open..close); set outside_session = true for a window that "
                     "reaches outside it", t.get(key))


def _every(t: dict, path: str, problems) -> int | None:
    """The period in seconds (None: a problem was added); a periodic job has no retries."""
    if t.get("retries", 0) not in (0, False):
        problems.add(f"{path}.retries", "a periodic job is not retried: its next slot is the "
                     "retry (a restarted slot would only be refused as already run)",
                     t["retries"])
    every = _TABLE.check("every", t, path, problems)
    if every is None:
        return None
    if every not in ALLOWED_PERIODS:
        problems.add(f"{path}.every", "the period must divide a minute (1, 2, 3, 4, 5, 6, 10, 12, "
                     "15, 20, 30 s), an hour (the same in min) or a day (1, 2, 3, 4, 6, 8, 12 h): "
                     "slots then fall on the same seconds of every minute", t["every"])
    return every


def _stall_after(t: dict, path: str, every: int | None, problems) -> int | None:
    stall_after = _TABLE.check("stall_after", t, path, problems)
    if stall_after is None:
        return None
    if every and stall_after < every:
        problems.add(f"{path}.stall_after", f"must be at least one period ({every} s): it "
                     "is how long no slot may start before a critical alert", t["stall_after"])
    return stall_after


def _check_grace(t: dict, path: str, every: int | None, problems) -> None:
    if "grace" in t and every:
        try:
            grace = parse_duration(t["grace"], 10 ** 9)
        except ValueError:
            return  # job_config.py reports it
        if grace > every:
            problems.add(f"{path}.grace", f"a periodic job's grace must not exceed its period "
                         f"({every} s): a run is judged against the latest slot", t["grace"])
