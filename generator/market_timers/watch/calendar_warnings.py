"""How long the installed calendar data lasts: the refresh's "calendar-stale" warnings, and status's.

* a calendar's data ends within `[watch] calendar_warn_days` (default 45): a warning naming the
  calendar and its last session, because no session after it is planned (the refresh raises it at
  most once a day per calendar, oncedaily.py; `status` shows it too);
* the installed exchange_calendars is getting old (`[watch] calendar_max_age_days`): a warning.
"""

from __future__ import annotations

import logging
from datetime import date, datetime

from market_timers.config.watch import watch_of
from market_timers.schedule import calendars

log = logging.getLogger("market_timers.watch")

# Calendars whose holidays exchange_calendars keeps as yearly tables (the exchange announces them
# a year at a time): the table's end tells how recent the installed data is.
YEARLY_TABLE_CALENDAR = "XSHG"


def calendar_end_warnings(config, now: datetime, last_session_of=None, warn_days: int = 45,
                          skip=frozenset()) -> list[tuple[str, str]]:
    """(calendar, text) for each calendar of the config whose data ends within `warn_days`."""
    last_session_of = last_session_of or calendars.last_session
    out = []
    names = sorted({calendars.resolve(c) for j in config.jobs if j.is_session_job
                    for c in j.all_calendars})
    for cal in names:
        if cal in skip:
            continue
        try:
            text = end_warning(cal, last_session_of(cal), now.date(), warn_days)
        except Exception as e:  # one calendar's check must not hide the others' warnings
            log.warning("refresh: cannot tell where %s's data ends: %s: %s", cal,
                        type(e).__name__, e)
            continue
        if text:
            out.append((cal, text))
    return out


def end_warning(cal: str, last: date | None, today: date, warn_days: int) -> str | None:
    """The warning for a calendar whose last session is `last` (None: no end), or None. Shared
    with `status`."""
    if last is None or warn_days <= 0 or (last - today).days > warn_days:
        return None
    when = "has passed" if last < today else f"is in {(last - today).days} day(s)"
    return (f"calendar {cal}: the installed exchange_calendars {calendars.version()} has "
            f"sessions up to {last} only; its last session {when} ([watch] calendar_warn_days = "
            f"{warn_days}). No session after it is planned, so its jobs stop running then. "
            "Upgrade the market-timers package (a newer exchange_calendars) before that day.")


def data_vintage() -> tuple[date, str] | None:
    """(about when the installed exchange_calendars data was made, how we know) or None.

    The package's files carry no release date (their mtimes are the install time). What it does
    carry are holiday tables kept a year at a time, for exchanges that announce holidays yearly:
    a release that knows XSHG's holidays up to 31 December of year Y was made once they were
    announced, around December of Y-1. That is the estimate; the end of the table is the
    calendar's public bound (calendars.data_limits).
    """
    try:
        end = calendars.data_limits(YEARLY_TABLE_CALENDAR)[1]
    except Exception:  # exchange_calendars broken or the calendar gone: say nothing wrong
        return None
    if end is None:
        return None
    return date(end.year - 1, 12, 1), (f"exchange_calendars {calendars.version()} knows "
                                       f"{YEARLY_TABLE_CALENDAR} holidays up to {end}")


def data_age_warning(now: datetime, max_age_days: int, vintage=None) -> str | None:
    if max_age_days <= 0:
        return None
    found = vintage if vintage is not None else data_vintage()
    if not found:
        log.info("refresh: cannot tell how old the installed exchange_calendars is")
        return None
    made, how = found
    age = (now.date() - made).days
    if age <= max_age_days:
        return None
    return (f"the installed exchange calendar data is about {age} days old ({how}, so it dates "
            f"from about {made:%Y-%m}), more than [watch] calendar_max_age_days = "
            f"{max_age_days}: closures announced since (a national day of mourning, a new "
            "holiday) are not known to it. Upgrade the market-timers package, or add them to "
            "[overrides.<calendar>] closed = [...] meanwhile.")


def status_warnings(config, now: datetime) -> list[str]:
    """The data-end warning for each calendar of the config ([watch] calendar_warn_days), for
    `status`: unlike the refresh's, a calendar that does not build says so. Never breaks status."""
    try:
        warn_days = watch_of(config).calendar_warn_days
        names = {c for j in config.jobs if j.is_session_job for c in j.all_calendars}
    except Exception:
        return []
    from market_timers.watch.calendarends import ends

    out = []
    found = ends(config.state_dir, sorted(names))  # kept for the installed exchange_calendars
    for name in sorted(names):
        if isinstance(found[name], str):  # a calendar that does not build: say so
            text = f"calendar {name}: cannot tell where its data ends: {found[name]}"
        else:
            text = end_warning(*found[name], now.date(), warn_days)
        if text and text not in out:
            out.append(text)
    return out
