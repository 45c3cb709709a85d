"""The config's checks that need the exchange calendars, and the loader that runs them.

config.py parses and checks everything that needs no calendar, so the commands on the hot path (the
alert handlers, the run records) load a config without importing exchange_calendars; `load` here
adds these checks in the same pass, so that every problem is still reported at once: calendar
names (each bad value once, naming every key that uses it), break events on calendars without a
break, and `[overrides]` (their calendar, and each date: a session of that calendar, times
inside it). config.py imports neither this module nor calendars.py: the dependency runs one way.
"""

from __future__ import annotations

import contextlib
import os
from datetime import date, time
from zoneinfo import ZoneInfo

from market_timers.config import loader as config_mod
from market_timers.config.jobpath import job_paths, path_of
from market_timers.config.loader import Config, Override
from market_timers.schedule.calendars import (
    CalendarError,
    calendar_for,
    data_limits,
    has_breaks,
    local_instant,
    resolve,
    supported_range,
    utc_instant,
    weekmasks_of,
)
from market_timers.schedule.plan import job_overrides
from market_timers.schedule.selection import joint_sessions
from market_timers.schema.problems import ConfigError, Problems


def load(path: str | os.PathLike) -> Config:
    """config.load(path) with the calendar checks, every problem in one ConfigError."""
    problems = Problems(str(path))
    config = config_mod.load(path, problems=problems)
    check_config(config, problems)
    if problems:
        raise ConfigError(problems)
    return config


def check_config(config: Config, problems: Problems) -> None:
    """Cross-checks that need the calendars: names (each bad value reported once, naming every
    key that uses it), break events, override calendars and override dates."""
    bad: dict[str, tuple[str, list[str]]] = {}  # value -> (why, keys using it)
    raw_jobs = config.raw.get("job", [])
    if isinstance(config.raw.get("calendar"), str):
        _resolve_into(config.raw["calendar"], "calendar", bad)
    raw_jobs = raw_jobs if isinstance(raw_jobs, list) else []
    for t, path in zip(raw_jobs, job_paths(raw_jobs), strict=True):
        if isinstance(t, dict) and isinstance(t.get("calendar"), str):
            _resolve_into(t["calendar"], f"{path}.calendar", bad)
        if isinstance(t, dict) and isinstance(t.get("calendars"), list):
            for k, name in enumerate(t["calendars"]):
                if isinstance(name, str):
                    _resolve_into(name, f"{path}.calendars[{k}]", bad)
    for job in config.jobs:
        if job.calendar is None or job.calendar in bad:
            continue
        if job.event in ("break_start", "break_end") and not _safe_has_breaks(job.calendar):
            problems.add(f"{path_of(raw_jobs, job.name)}.event", f"calendar {resolve(job.calendar)} never has a break (a midday "
                         "pause): no session would ever fire", job.event)
    for job in config.jobs:
        if job.calendars and not any(c in bad for c in job.calendars):
            _check_event_from(job, raw_jobs, problems)
        if job.extra and job.calendar is not None and job.calendar not in bad:
            check_extra(config, job, f"{path_of(raw_jobs, job.name)}.extra", problems)
    seen: dict[str, str] = {}
    for cal, override in config.overrides.items():
        try:
            canonical = resolve(cal)
        except CalendarError as e:
            bad.setdefault(cal, (str(e), []))[1].append(f"overrides.{cal}")
            continue
        if canonical in seen:
            problems.add(f"overrides.{cal}", f"a second table for {canonical} (also "
                         f"overrides.{seen[canonical]}): merge them into one")
        seen.setdefault(canonical, cal)
        check_override(canonical, override, f"overrides.{cal}", problems)
    for value, (why, keys) in bad.items():
        also = f" (used by {', '.join(keys)})" if len(keys) > 1 else ""
        problems.add(keys[0], why + also, value)


def _resolve_into(value: str, key: str, bad: dict) -> None:
    try:
        resolve(value)
    except CalendarError as e:
        bad.setdefault(value, (str(e), []))[1].append(key)


def _safe_has_breaks(name: str) -> bool:
    try:
        return has_breaks(name)
    except CalendarError:  # a calendar that does not build is the planner's failure to report
        return True


def check_override(canonical: str, override: Override, path: str, problems: Problems) -> None:
    """Each override date must be a session of the calendar (else it silently does nothing),
    and a moved open or close must stay inside that session."""
    dates = ([("closed", d, None) for d in sorted(override.closed)]
             + [("early_close", d, t) for d, t in override.early_close]
             + [("late_open", d, t) for d, t in override.late_open])
    # A date outside the calendar's data (or the planned range) can never be planned, so an
    # override there changes nothing either way: it is left unchecked.
    first, last = supported_range()
    inside = [d for _, d, _ in dates if first <= d <= last]
    if inside:  # built first, so that the data's bounds come without a default-window build
        with contextlib.suppress(CalendarError):
            calendar_for(canonical, min(inside), max(inside))
    try:
        data_first, data_last = data_limits(canonical)
    except CalendarError:
        return  # a calendar that does not build is reported by the planner, per calendar
    first, last = max(first, data_first or first), min(last, data_last or last)
    dates = [(k, d, t) for k, d, t in dates if first <= d <= last]
    if not dates:
        return
    try:
        cal = calendar_for(canonical, min(d for _, d, _ in dates), max(d for _, d, _ in dates))
        local = ZoneInfo(str(cal.tz))
    except CalendarError:
        return  # as above: the planner reports it, per calendar
    sched = cal.schedule
    for key, day, at in dates:
        where = f"{path}.{key}" + (f".{day}" if at is not None else "")
        value = day.isoformat() if at is None else _hm(at)
        label = _label(day)
        if label not in sched.index:
            problems.add(where, f"not a session of {canonical}: {_why_not(cal, day)}; "
                         "an override on it would do nothing", value)
            continue
        if at is None:
            continue
        row = sched.loc[label]
        opens, closes = utc_instant(row["open"]), utc_instant(row["close"])
        moved = local_instant(day, at, local)
        hm = f"{opens.astimezone(local):%H:%M}-{closes.astimezone(local):%H:%M}"
        if key == "early_close" and not opens < moved <= closes:
            problems.add(where, f"an early close must fall inside the session ({canonical} "
                         f"{day} trades {hm} exchange time)", value)
        if key == "late_open" and not opens <= moved < closes:
            problems.add(where, f"a late open must fall inside the session ({canonical} {day} "
                         f"trades {hm} exchange time)", value)
    early = dict(override.early_close)
    for day, at in override.late_open:
        if day in early and not at < early[day]:
            problems.add(f"{path}.late_open.{day}", f"the late open is not before the early "
                         f"close of the same day ({early[day]:%H:%M})", _hm(at))
    for day in sorted(override.closed & ({d for d, _ in override.early_close}
                                         | {d for d, _ in override.late_open})):
        problems.add(f"{path}.closed", f"{day} is closed and also has an early close or late "
                     "open: keep one", day.isoformat())


def _check_event_from(job, raw_jobs, problems: Problems) -> None:
    """A job on several calendars takes its instant from one of them (or earliest / latest)."""
    if job.event_from in ("earliest", "latest"):
        return
    cals = [resolve(c) for c in job.calendars]
    try:
        ok = resolve(job.event_from) in cals
    except CalendarError:
        ok = False
    if not ok:
        problems.add(f"{path_of(raw_jobs, job.name)}.event_from", f"one of the job's calendars ({', '.join(cals)}), or earliest or "
                     "latest (of their events that day)", job.event_from)


def check_extra(config: Config, job, key: str, problems: Problems) -> None:
    """A job's `extra` dates must be sessions of its calendar (the overrides' closed days are
    not), else they silently add nothing; dates outside the planned range are left unchecked."""
    first, last = supported_range()
    try:
        canonical = resolve(job.calendar)
        data_first, data_last = data_limits(canonical)
    except CalendarError:
        return  # reported with the calendar's name, or by the planner
    first, last = max(first, data_first or first), min(last, data_last or last)
    days = sorted(d for d in job.extra if first <= d <= last)
    if not days:
        return
    try:
        cal = calendar_for(canonical, days[0], days[-1])
    except CalendarError:
        return
    if job.calendars:  # several exchanges: a day they trade (all of them, or any)
        try:
            open_days = {x.label for x in joint_sessions(job, days[0], days[-1],
                                                         job_overrides(config, job))}
        except CalendarError:
            return
        both = " and ".join if job.open_on == "all" else " or ".join
        for day in days:
            if day not in open_days:
                problems.add(key, f"not a day on which {both(resolve(c) for c in job.calendars)}"
                             " trade; an extra date must be one", day.isoformat())
        return
    closed = next((o.closed for name, o in config.overrides.items()
                   if _same_calendar(name, canonical)), frozenset())
    for day in days:
        if _label(day) not in cal.schedule.index:
            problems.add(key, f"not a session of {canonical}: {_why_not(cal, day)}; an extra "
                         "date must be a session", day.isoformat())
        elif day in closed:
            problems.add(key, f"not a session of {canonical}: the config's overrides close it; "
                         "an extra date must be a session", day.isoformat())


def _same_calendar(name: str, canonical: str) -> bool:
    try:
        return resolve(name) == canonical
    except CalendarError:
        return False


def _hm(at: time) -> str:
    return at.isoformat(timespec="minutes" if at.second == 0 else "seconds")


def _label(day: date):
    import pandas as pd  # heavy: only for a date the calendar refuses

    return pd.Timestamp(day)


def _why_not(cal, day: date) -> str:
    """Which weekday or holiday a non-session date is."""
    if _weekmask_on(cal, day)[day.weekday()] == "0":
        return f"{day} is a {day:%A}"
    name = _holiday_name(cal, day)
    return f"{day} is a holiday ({name}) on {cal.name}" if name else \
        f"{day} is a holiday on {cal.name}"


def _weekmask_on(cal, day: date) -> str:
    """The calendar's weekmask in force on `day` (TASE: Sunday to Thursday until 2026-01-04)."""
    from market_timers.schedule import weeks

    return weeks.weekmask_on(day, *weekmasks_of(cal))


def _holiday_name(cal, day: date) -> str | None:
    import pandas as pd  # heavy: only for a date the calendar refuses

    try:
        rules = cal.regular_holidays
        if rules is None:
            return None
        names = rules.holidays(pd.Timestamp(day), pd.Timestamp(day), return_name=True)
    except Exception:  # a calendar without named rules: say "a holiday"
        return None
    if len(names):
        return str(names.iloc[0])
    return None
