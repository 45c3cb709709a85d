"""Exchange sessions from exchange_calendars, with the config's manual overrides applied.

This is the only module that imports exchange_calendars (check-cron and the refresh's data-age
check go through it); the runner and the alert handlers never import it. A calendar's sessions,
overrides applied, are calendar_sessions.py's.

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

import warnings
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from functools import lru_cache
from zoneinfo import ZoneInfo

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
    import exchange_calendars  # heavy: loaded on the first calendar asked for

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


def install_stamp() -> str:
    """What tells one install of exchange_calendars from another without importing it (the
    import is pandas: a cache of what it says is kept per install): its version and the mtime
    of its package (a reinstall of the same version, a source checkout's edit)."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("exchange_calendars")  # finds it, imports nothing
        origin = spec.origin if spec is not None else None
        mtime = os.stat(origin).st_mtime_ns if origin else 0
    except (ImportError, ValueError, OSError):
        mtime = 0
    return f"{version()} {mtime}"


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
    import pandas as pd  # heavy: only when a calendar is built

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


def zone_of(canonical: str, cal) -> ZoneInfo:
    """The time zone of a calendar just built (kept for tz())."""
    return _zones.setdefault(canonical, ZoneInfo(str(cal.tz)))


def local_instant(day: date, t: time, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, t, tzinfo=zone).astimezone(UTC)


def utc_instant(value) -> datetime | None:
    import pandas as pd  # heavy: loaded by the checks that compare instants

    if value is None or pd.isna(value):
        return None
    return value.to_pydatetime().astimezone(UTC)


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
