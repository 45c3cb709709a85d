"""`[overrides.<calendar>]`: what the exchange announced beyond its calendar's data (days closed,
early closes, late opens), applied to its sessions by schedule/calendars.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, time
from typing import Any

from market_timers.schema.problems import Problems
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import AT_TIME, as_date, date_list, time_of_day


@dataclass(frozen=True)
class Override:
    closed: frozenset[date] = frozenset()
    early_close: tuple[tuple[date, time], ...] = ()  # exchange-local wall time of that day
    late_open: tuple[tuple[date, time], ...] = ()


def moved_times(value: object) -> tuple[tuple[date, time], ...]:
    """early_close / late_open: "YYYY-MM-DD" = "HH:MM", the exchange's local time that day."""
    if not isinstance(value, dict):
        raise Bad('must be a table of "YYYY-MM-DD" = "HH:MM" (exchange-local time of that day)')
    items, bad = [], []
    for day, hhmm in value.items():
        d = as_date(day)
        if d is None:
            bad.append(Bad("must be a date YYYY-MM-DD", at=f".{day}", shown=day))
        m = AT_TIME.match(hhmm) if isinstance(hhmm, str) else None
        if not m or m.group(4):
            bad.append(Bad('must be "HH:MM" (or "HH:MM:SS") in the exchange\'s local time of '
                           "that day", at=f".{day}", shown=hhmm))
        elif (t := time_of_day(m)) is None:
            bad.append(Bad("not a valid time of day (00:00 to 23:59:59, the exchange's local "
                           "time of that day)", at=f".{day}", shown=hhmm))
        elif d is not None:
            items.append((d, t))
    if bad:
        raise Bad.each(bad)
    return tuple(sorted(items))


OVERRIDE = Table((
    Key("closed", date_list, [], "days the exchange is closed"),
    Key("early_close", moved_times, (), "days it closes early, and when"),
    Key("late_open", moved_times, (), "days it opens late, and when"),
), not_table="must be a table with closed / early_close / late_open")
OVERRIDE_KEYS = set(OVERRIDE.names)



def parse_override(table: Any, path: str, problems: Problems) -> Override:
    values = OVERRIDE.parse(table, path, problems)
    if values is None:
        return Override()
    return Override(closed=frozenset(values["closed"]), early_close=values["early_close"],
                    late_open=values["late_open"])
