"""Exchange sessions from exchange_calendars, with the config's manual overrides applied.

This is the only module that imports exchange_calendars (check-cron and the refresh's data-age
check go through it); the runner and the alert handlers never import it.

Windows. exchange_calendars builds a calendar for a window of dates; without one it picks 20 years
back and one year ahead of today, silently. Here every calendar is built for the window asked for
(rounded out to whole years, so that nearby requests share one build, and cached per process),
inside two limits that are said out loud when a request crosses them:

* the range market-timers plans at all (`supported_range`): from FIRST_DAY to the end of the year
  YEARS_AHEAD years from now. Before it, exchange_calendars' rules describe today's trading hours,
  not the ones of the time; after it a rule-based calendar only projects today's holiday rules.
  `plan` and `check-cron` apply the same rule (`check_range`).
* the calendar's own data (`data_limits`): some calendars record their holidays as yearly tables
  (XSHG, XBOM, XSES: up to 2026-12-31 in exchange_calendars 4.13) and cannot be built past them.
  That end is the class's public `bound_max()`; a calendar without one computes holidays from rules.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from market_timers.config.jobs import EVENTS
from market_timers.config.loader import Override
from market_timers.schema.problems import did_you_mean

FIRST_DAY = date(1990, 1, 1)
YEARS_AHEAD = 5


@dataclass(frozen=True, slots=True)
class Session:
    calendar: str  # canonical exchange_calendars name
    label: date  # the session's date (a futures session may open the calendar day before)
    open: datetime  # aware, UTC
    close: datetime
    break_start: datetime | None = None
    break_end: datetime | None = None

    def event(self, name: str) -> datetime | None:
        return getattr(self, name)


class CalendarError(ValueError):
    pass


def _xc():
    import exchange_calendars

    return exchange_calendars


def known_names() -> list[str]:
    xc = _xc()
    return sorted(set(xc.get_calendar_names(include_aliases=True)))


def canonical_names() -> list[str]:
    """Every calendar exchange_calendars ships, without aliases."""
    return sorted(_xc().get_calendar_names(include_aliases=False))


def resolve(name: str) -> str:
    """Canonical calendar name for a name or alias; CalendarError suggesting close names."""
    xc = _xc()
    names = known_names()
    if name in names:
        return xc.resolve_alias(name)
    raise CalendarError(f"unknown exchange calendar{did_you_mean(name, names)} (see exchange_calendars."
                        f"get_calendar_names())")


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("exchange_calendars")
    except Exception:  # not installed as a distribution (a source checkout)
        return "?"


# the window ------------------------------------------------------------------------------------

def supported_range(today: date | None = None) -> tuple[date, date]:
    today = today or datetime.now(UTC).date()
    return FIRST_DAY, date(today.year + YEARS_AHEAD, 12, 31)


def check_range(start: date, end: date, today: date | None = None) -> None:
    """The one range rule of `plan` and `check-cron`: CalendarError outside supported_range."""
    lo, hi = supported_range(today)
    if start < lo or end > hi:
        raise CalendarError(
            f"asked for {start}..{end}; market-timers plans and checks dates from {lo} to {hi} "
            f"only (before {lo.year} exchange_calendars' rules describe today's trading hours, "
            f"not those of the time; after {hi.year} a calendar only projects today's holiday "
            "rules)")


# Classes of the calendars built so far: bound_min()/bound_max() are public class methods.
_classes: dict[str, type] = {}


@lru_cache(maxsize=64)
def _build(canonical: str, start: date, end: date):
    import pandas as pd

    # exchange_calendars 4.x trips pandas deprecation warnings in its own code while it builds a
    # calendar: nothing a user can act on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        cal = _xc().get_calendar(canonical, start=pd.Timestamp(start), end=pd.Timestamp(end))
    _classes[canonical] = type(cal)
    return cal


def _class_of(canonical: str) -> type:
    """The calendar's class, from a calendar built earlier or exchange_calendars' default one
    (which always lies inside the class's bounds)."""
    if canonical not in _classes:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            try:
                _classes[canonical] = type(_xc().get_calendar(canonical))
            except Exception as e:
                raise CalendarError(f"{canonical}: exchange_calendars {version()} cannot build "
                                    f"this calendar: {type(e).__name__}: {e}") from None
    return _classes[canonical]


def data_limits(name: str) -> tuple[date | None, date | None]:
    """(first, last) date exchange_calendars has holiday data for; None where it sets no bound
    (holidays computed from rules)."""
    cls = _class_of(resolve(name))
    lo, hi = cls.bound_min(), cls.bound_max()
    return (lo.date() if lo is not None else None, hi.date() if hi is not None else None)


def _window(canonical: str, start: date, end: date) -> tuple[date, date]:
    """The whole years around start..end, inside the supported range and the calendar's data."""
    lo, hi = supported_range()
    s = max(date(start.year, 1, 1), lo)
    e = min(date(end.year, 12, 31), hi)
    first, last = data_limits(canonical) if canonical in _classes else (None, None)
    if first is not None:
        s = max(s, first)
    if last is not None:
        e = min(e, last)
    return s, e


def _out_of_data(canonical: str, start: date, end: date) -> CalendarError:
    lo, hi = supported_range()
    first, last = data_limits(canonical)
    if last is not None and start > last:
        return CalendarError(f"{canonical}: exchange_calendars {version()} records {canonical}'s "
                             f"holidays up to {last} only; asked for {start}..{end}. Upgrade "
                             "exchange_calendars (the market-timers package)")
    if first is not None and end < first:
        return CalendarError(f"{canonical}: exchange_calendars {version()} has {canonical} from "
                             f"{first} on only; asked for {start}..{end}")
    return CalendarError(f"{canonical}: asked for {start}..{end}, outside the dates market-timers "
                         f"plans ({lo} to {hi})")


def calendar_for(name: str, start: date, end: date):
    """The exchange_calendars calendar built for a window covering start..end as far as the data
    goes. CalendarError (naming the calendar) when none of it is covered or the build fails."""
    canonical = resolve(name)
    known = canonical in _classes
    s, e = _window(canonical, start, end)
    if s < e:
        try:
            return _build(canonical, s, e)
        except ValueError as err:  # a bound of the calendar's data crossed, when not yet known
            if known:
                raise _build_error(canonical, s, e, err) from None
        except Exception as err:
            raise _build_error(canonical, s, e, err) from None
    _class_of(canonical)  # learn the calendar's bounds, then retry inside them
    s, e = _window(canonical, start, end)
    if s >= e or end < s or start > e:
        raise _out_of_data(canonical, start, end)
    try:
        return _build(canonical, s, e)
    except Exception as err:
        raise _build_error(canonical, s, e, err) from None


def _build_error(canonical: str, s: date, e: date, err: Exception) -> CalendarError:
    return CalendarError(f"{canonical}: exchange_calendars {version()} cannot build this calendar "
                         f"for {s}..{e}: {type(err).__name__}: {err}")


def _some_calendar(name: str):
    """A built calendar for class-level facts (time zone, breaks): this year's, else the nearest
    year with data."""
    today = datetime.now(UTC).date()
    try:
        return calendar_for(name, today, today)
    except CalendarError:
        first, last = data_limits(name)
        day = last if last is not None and last < today else first or today
        return calendar_for(name, day, day)


# Time zone per calendar name: a class-level fact, learnt from any build of the calendar. A plan's
# output asks for it once per fire: it must not go back to exchange_calendars each time.
_zones: dict[str, ZoneInfo] = {}


def tz(name: str) -> ZoneInfo:
    zone = _zones.get(name)
    if zone is None:
        zone = _zones[name] = ZoneInfo(str(_some_calendar(name).tz))
    return zone


def has_breaks(name: str) -> bool:
    return _some_calendar(name).break_start_times is not None


def last_session(name: str) -> date | None:
    """The calendar's last session in the installed data, or None when its holidays come from
    rules without an end (then the data has no last session)."""
    _, last = data_limits(name)
    if last is None:
        return None
    return calendar_for(name, last, last).last_session.date()


# sessions --------------------------------------------------------------------------------------

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
    local = _zones.setdefault(canonical, ZoneInfo(str(cal.tz)))
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


def weekmasks(name: str, start: date, end: date) -> tuple[str, tuple]:
    """weekmasks_of the calendar built for start..end (a window the caller has built it for: no
    other build)."""
    return weekmasks_of(calendar_for(name, start, end))


def weekmasks_of(cal) -> tuple[str, tuple]:
    """An exchange_calendars calendar's regular weekmask and its special ones ((first, last,
    weekmask), dates inclusive, None: unbounded), as schedule/weeks.py takes them."""
    specials = tuple((_day_or_none(a), _day_or_none(b), mask)
                     for a, b, mask in getattr(cal, "special_weekmasks", None) or ())
    return getattr(cal, "weekmask", "1111100"), specials


def _day_or_none(value) -> date | None:
    return None if value is None else value.date()


def instants(seconds) -> list[datetime | None]:
    """UTC seconds (NO_TIME: None) as aware datetimes."""
    return [None if s == NO_TIME else datetime.fromtimestamp(s, UTC) for s in seconds.tolist()]


def covered_until(name: str, end: date) -> date | None:
    """The last date up to `end` that the data covers, when it stops before `end`."""
    _, last = data_limits(name)
    return last if last is not None and last < end else None


def local_instant(day: date, t: time, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, t, tzinfo=zone).astimezone(UTC)


def utc_instant(value) -> datetime | None:
    import pandas as pd

    if value is None or pd.isna(value):
        return None
    return value.to_pydatetime().astimezone(UTC)


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
