"""A periodic job's slots: every `every` inside the window of each session (the keys, and the
Periodic they give, are config/periodic.py's), and the OnCalendar= lines of a session's timer.

Slots are aligned to the window start: start, start + every, ... up to the end. Everything is
computed in UTC from the session's own open/close (exchange_calendars), so early closes, late opens,
overnight sessions and DST follow from the calendar. A session whose window is empty has no slot.

* The window is clipped to the session, open..close (unless outside_session): `from =
  "open+7h"` on a 13:00 early close has no slot after 13:00.
* No slot strictly inside the break (unless during_break). A window that starts inside the break
  keeps its alignment: its first slot is the first start + k * every at or after break_end.
* A slot belongs to one session only: a session's slots stop before the next session's first
  slot. Where a close is also the next session's open (CMES at 17:00 Chicago, the 24/7 calendar at
  midnight UTC), the slot at that instant is the next session's.
Imported by plan.py and render.py; never imports pandas or exchange_calendars.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from market_timers.config.periodic import Periodic

# Slots -----------------------------------------------------------------------------------------

def window(session, p: Periodic) -> tuple[datetime, datetime] | None:
    """The session's window (UTC), clipped to open..close unless outside_session; None when its
    events are missing."""
    a, b = session.event(p.start_event), session.event(p.end_event)
    if a is None or b is None:
        return None
    start, end = a + timedelta(seconds=p.start_offset), b + timedelta(seconds=p.end_offset)
    if not p.outside_session:
        start, end = max(start, session.open), min(end, session.close)
    return start, end


def pause(session, p: Periodic) -> tuple[datetime, datetime] | None:
    """The break during which no slot runs (exclusive at both ends), or None."""
    if p.during_break or session.break_start is None or session.break_end is None:
        return None
    return session.break_start, session.break_end


def session_slots(session, p: Periodic, following=None) -> list[datetime]:
    """Every slot of the session: aligned to the window start, the end inclusive, no slot
    strictly inside the break (unless during_break), none at or after the first slot of the
    `following` session (the next one, when known). Empty when the window is empty."""
    w = window(session, p)
    if w is None or w[1] < w[0]:
        return []
    start, end = w
    gap = pause(session, p)
    count = int((end - start).total_seconds()) // p.every + 1
    slots = [start + timedelta(seconds=k * p.every) for k in range(count)]
    if gap is not None:
        slots = [s for s in slots if not gap[0] < s < gap[1]]
    if following is not None:
        theirs = session_slots(following, p)
        if theirs:
            slots = [s for s in slots if s < theirs[0]]
    return slots


# OnCalendar= ----------------------------------------------------------------------------------

def _compact(values: list[int], full: range) -> str:
    """Sorted ints as systemd.time(7) components: `*`, `a..b`, `a..b/step`, commas between."""
    if values == list(full):
        return "*"
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i + 1
        if j < len(values):
            step = values[j] - values[i]
            while j + 1 < len(values) and values[j + 1] - values[j] == step:
                j += 1
            if j - i >= 2:  # three or more in one arithmetic run
                parts.append(f"{values[i]:02d}..{values[j]:02d}" + (f"/{step}" if step > 1
                                                                     else ""))
                i = j + 1
                continue
        parts.append(f"{values[i]:02d}")
        i += 1
    return ",".join(parts)


def calendar_lines(slots: list[datetime]) -> list[str]:
    """`OnCalendar=` values (UTC) whose union is exactly `slots`.

    Hand-written: no library turns a set of instants into systemd calendar specs. Each line is a
    product date x hours x minutes x seconds; the slots are grouped so that every group is such a
    product: per (date, hour, minute) the set of seconds, then per (date, hour, seconds) the set of
    minutes, then per (date, minutes, seconds) the set of hours. Exact by construction, and a test
    checks every rendered timer against `systemd-analyze calendar --iterations`.
    """
    utc = sorted({s.astimezone(UTC) for s in slots})
    by_minute: dict[tuple, list[int]] = {}
    for s in utc:
        by_minute.setdefault((s.date(), s.hour, s.minute), []).append(s.second)
    by_hour: dict[tuple, list[int]] = {}
    for (day, hour, minute), seconds in by_minute.items():
        by_hour.setdefault((day, hour, tuple(seconds)), []).append(minute)
    by_day: dict[tuple, list[int]] = {}
    for (day, hour, seconds), minutes in by_hour.items():
        by_day.setdefault((day, tuple(minutes), seconds), []).append(hour)
    lines = []
    for (day, minutes, seconds), hours in by_day.items():
        lines.append((day, min(hours), f"{day.isoformat()} {_compact(sorted(hours), range(24))}:"
                      f"{_compact(list(minutes), range(60))}:{_compact(list(seconds), range(60))}"
                      " UTC"))
    return [text for _, _, text in sorted(lines)]


def schedule_tag(lines: list[str]) -> str:
    """A short digest of the OnCalendar lines, part of the unit name: a changed slot list is a new
    unit (systemd 252 may fire a timer whose OnCalendar is edited in place, #16732)."""
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:6]
