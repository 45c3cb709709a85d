"""Exchange sessions from exchange_calendars, with the config's manual overrides applied.

This is the only module (with plan.py) that imports pandas / exchange_calendars; the runner and the
alert handlers never import it.
"""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from .config import Config, Override
from .errors import Problems


@dataclass(frozen=True)
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


def resolve(name: str) -> str:
    """Canonical calendar name for a name or alias; CalendarError suggesting close names."""
    xc = _xc()
    names = known_names()
    if name in names:
        return xc.resolve_alias(name) if hasattr(xc, "resolve_alias") else _resolve_alias(name)
    upper = {n.upper(): n for n in names}
    close = difflib.get_close_matches(name.upper(), list(upper), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(upper[c] for c in close)}?" if close else ""
    raise CalendarError(f"unknown exchange calendar{hint} (see exchange_calendars."
                        f"get_calendar_names())")


def _resolve_alias(name: str) -> str:
    from exchange_calendars.calendar_utils import global_calendar_dispatcher

    return global_calendar_dispatcher.resolve_alias(name)


@lru_cache(maxsize=32)
def calendar(name: str):
    # exchange_calendars 4.x trips pandas 3 deprecation warnings in its own code while it builds
    # a calendar: nothing a user can act on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        return _xc().get_calendar(resolve(name))


def tz(name: str) -> ZoneInfo:
    return ZoneInfo(str(calendar(name).tz))


def has_breaks(name: str) -> bool:
    sched = calendar(name).schedule
    return bool(sched["break_start"].notna().any())


def bounds(name: str) -> tuple[date, date]:
    cal = calendar(name)
    return cal.first_session.date(), cal.last_session.date()


def check_config(config: Config, problems: Problems) -> None:
    """Cross-checks that need the calendars: names, break events, override calendars."""
    for i, job in enumerate(config.jobs):
        if job.calendar is None:
            continue
        try:
            resolve(job.calendar)
        except CalendarError as e:
            key = f"job[{i}].calendar" if _job_sets_calendar(config, i) else "calendar"
            problems.add(key, str(e), job.calendar)
            continue
        if job.event in ("break_start", "break_end") and not has_breaks(job.calendar):
            problems.add(f"job[{i}].event", f"calendar {resolve(job.calendar)} never has a "
                         "break (a midday pause): no session would ever fire", job.event)
    seen: dict[str, str] = {}
    for cal in config.overrides:
        try:
            canonical = resolve(cal)
        except CalendarError as e:
            problems.add(f"overrides.{cal}", str(e), cal)
            continue
        if canonical in seen:
            problems.add(f"overrides.{cal}", f"a second table for {canonical} (also "
                         f"overrides.{seen[canonical]}): merge them into one")
        seen.setdefault(canonical, cal)


def _job_sets_calendar(config: Config, i: int) -> bool:
    jobs = config.raw.get("job", [])
    return i < len(jobs) and "calendar" in jobs[i]


def sessions(name: str, start: date, end: date, override: Override | None = None
             ) -> list[Session]:
    """Sessions with label in [start, end], overrides applied. CalendarError outside bounds."""
    import pandas as pd

    canonical = resolve(name)
    first, last = bounds(name)
    if end < first or start > last:
        raise CalendarError(f"{canonical} has sessions from {first} to {last} in the installed "
                            f"exchange_calendars; asked for {start}..{end}")
    sched = calendar(name).schedule.loc[pd.Timestamp(start):pd.Timestamp(end)]
    override = override or Override()
    local = tz(name)
    early = dict(override.early_close)
    late = dict(override.late_open)
    out = []
    for label, row in sched.iterrows():
        day = label.date()
        if day in override.closed:
            continue
        s = Session(canonical, day, _utc(row["open"]), _utc(row["close"]),
                    _utc(row["break_start"]), _utc(row["break_end"]))
        if day in early:
            s = _replace(s, close=_local(day, early[day], local))
        if day in late:
            s = _replace(s, open=_local(day, late[day], local))
        out.append(s)
    return out


def _replace(s: Session, **kw) -> Session:
    from dataclasses import replace

    return replace(s, **kw)


def _local(day: date, t: time, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, t, tzinfo=zone).astimezone(UTC)


def _utc(value) -> datetime | None:
    import pandas as pd

    if value is None or pd.isna(value):
        return None
    return value.to_pydatetime().astimezone(UTC)


def next_sessions(name: str, after: datetime, count: int, override: Override | None = None
                  ) -> list[Session]:
    """The next `count` sessions whose close is after `after` (the current session included)."""
    first, last = bounds(name)
    start = max(first, (after - timedelta(days=2)).date())
    out: list[Session] = []
    span = max(14, count * 2)
    while len(out) < count and start <= last:
        end = min(last, start + timedelta(days=span))
        out.extend(s for s in sessions(name, start, end, override)
                   if s.close > after and s not in out)
        start = end + timedelta(days=1)
    return out[:count]
