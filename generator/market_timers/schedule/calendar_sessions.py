"""A calendar's sessions, with the config's [overrides] applied: as columns (session_table, for
plans over years), as Session rows, the next ones after an instant, and the special days a
session rule asks about. The calendars themselves are built by calendars.py.

pandas and numpy are imported where the columns are made: importing the plan must not load them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from market_timers.config.jobs import EVENTS
from market_timers.config.loader import Override
from market_timers.schedule.calendars import (
    CalendarError,
    Session,
    calendar_for,
    data_limits,
    local_instant,
    resolve,
    supported_range,
    version,
    zone_of,
)

NO_TIME = -(2**63)  # in SessionTable.seconds: no such event that day (no break)
EPOCH_DAY = date(1970, 1, 1).toordinal()


@dataclass(frozen=True)
class SessionTable:
    """A calendar's sessions as columns (numpy int64): the label as days since 1970-01-01 and
    each event as whole UTC seconds since the epoch (NO_TIME: none that day)."""

    calendar: str
    days: object  # np.ndarray
    seconds: dict[str, object]  # event -> np.ndarray


def session_table(name: str, start: date, end: date, override: Override | None = None
                  ) -> SessionTable:
    """Sessions with label in [start, end] as far as the data goes, overrides applied, computed
    over whole schedule columns (a pandas row per session cost half of a large plan's time).
    CalendarError when the calendar cannot cover any of it."""
    import numpy as np
    import pandas as pd

    canonical = resolve(name)
    cal = calendar_for(canonical, start, end)
    sched = cal.schedule.loc[pd.Timestamp(start):pd.Timestamp(end)]
    local = zone_of(canonical, cal)
    days = sched.index.to_numpy().astype("datetime64[D]").astype(np.int64)
    seconds = {}
    for event in EVENTS:
        values = sched[event].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
        # Sessions are whole minutes: the unit "s" drops nothing.
        column = values.astype("datetime64[s]").astype(np.int64)
        column[np.isnat(values)] = NO_TIME
        seconds[event] = column
    override = override or Override()
    for event, moved in (("close", override.early_close), ("open", override.late_open)):
        for day, at in moved:
            seconds[event][days == day.toordinal() - EPOCH_DAY] = int(
                local_instant(day, at, local).timestamp())
    if override.closed:
        keep = ~np.isin(days, [d.toordinal() - EPOCH_DAY for d in override.closed])
        days = days[keep]
        seconds = {event: column[keep] for event, column in seconds.items()}
    return SessionTable(canonical, days, seconds)


def sessions(name: str, start: date, end: date, override: Override | None = None
             ) -> list[Session]:
    """Sessions with label in [start, end] as far as the data goes, overrides applied.
    CalendarError when the calendar cannot cover any of it."""
    table = session_table(name, start, end, override)
    labels = [date.fromordinal(EPOCH_DAY + d) for d in table.days.tolist()]
    columns = [instants(table.seconds[event]) for event in EVENTS]
    return [Session(table.calendar, *row) for row in zip(labels, *columns, strict=True)]


def special_days(name: str, start: date, end: date, override: Override | None = None
                 ) -> tuple[frozenset[date], frozenset[date]]:
    """(early-close days, late-open days) labelled start..end as far as the data goes: the
    calendar's own (exchange_calendars' early_closes / late_opens: a close before, an open
    after, the prevailing regular time) and the overrides', without the overrides' closed days."""
    import pandas as pd

    cal = calendar_for(resolve(name), start, end)
    lo, hi = pd.Timestamp(start), pd.Timestamp(end)
    override = override or Override()

    def days(index, moved) -> frozenset[date]:
        own = {d.date() for d in index if lo <= d <= hi}
        return frozenset((own | {d for d, _ in moved if start <= d <= end}) - override.closed)

    return days(cal.early_closes, override.early_close), days(cal.late_opens, override.late_open)


def instants(seconds) -> list[datetime | None]:
    """UTC seconds (NO_TIME: None) as aware datetimes."""
    return [None if s == NO_TIME else datetime.fromtimestamp(s, UTC) for s in seconds.tolist()]


def covered_until(name: str, end: date) -> date | None:
    """The last date up to `end` that the data covers, when it stops before `end`."""
    _, last = data_limits(name)
    return last if last is not None and last < end else None


def next_sessions(name: str, after: datetime, count: int, override: Override | None = None
                  ) -> list[Session]:
    """The next `count` sessions whose close is after `after` (the current session included),
    fewer when the calendar's data ends first. CalendarError when it has none at all."""
    canonical = resolve(name)
    start = (after - timedelta(days=2)).date()
    span = max(14, count * 2)
    with contextlib.suppress(CalendarError):  # the first window: it also tells the data's bounds
        calendar_for(canonical, start, start + timedelta(days=span))
    _, last = data_limits(canonical)
    _, policy_end = supported_range()
    stop = min(last, policy_end) if last is not None else policy_end
    if start > stop:
        raise none_after(canonical, after, last)
    out: list[Session] = []
    while len(out) < count and start <= stop:
        end = min(stop, start + timedelta(days=span))
        out.extend(s for s in sessions(canonical, start, end, override)
                   if s.close > after and s not in out)
        start = end + timedelta(days=1)
    if not out and last is not None and last <= after.date():
        raise none_after(canonical, after, last)
    return out[:count]


def follower(name: str, override: Override | None = None):
    """`after(session)`: the session that follows `session` in the calendar (overrides applied),
    or None when the data ends first. A periodic job's last slot may be shared with it."""
    def after(session: Session) -> Session | None:
        try:
            found = next_sessions(name, session.close, 1, override)
        except CalendarError:
            return None
        return found[0] if found and found[0].label > session.label else None

    return after


def none_after(canonical: str, after: datetime, last: date | None) -> CalendarError:
    """The error for a calendar with no session left after `after`: where its data ends when
    that is the reason (it ends before the dates market-timers plans do)."""
    lo, hi = supported_range()
    if last is not None and last <= hi:
        return CalendarError(f"{canonical}: exchange_calendars {version()} records "
                             f"{canonical}'s holidays up to {last} only: no session after "
                             f"{after:%Y-%m-%d %H:%M} UTC is known. Upgrade exchange_calendars "
                             "(the market-timers package)")
    return CalendarError(f"{canonical}: {after:%Y-%m-%d} is outside the dates market-timers "
                         f"plans ({lo} to {hi})")
