"""What a sync changed, worded for people: the refresh's "calendar-changed" alerts.

sync reports each fire it removed or moved (a Change); here each becomes one line, grouped by
(calendar, session) into one alert:
    XNYS 2027-01-09: closed, was a session (signal was due 2027-01-09T20:45:00Z)
    XNYS 2026-12-24: signal moved from 20:45:00Z to 17:45:00Z
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

from market_timers.config.sessionrules import describe
from market_timers.schedule import calendar_sessions, calendars, selection
from market_timers.schedule.plan import calendar_overrides


def _hms(text: str) -> str:
    return text[11:] if len(text) == 20 else text


def describe_changes(config, changes) -> list[tuple[str, str, str]]:
    """(calendar, session, line) for each Change sync reported, worded for people."""
    jobs = {j.name: j for j in config.jobs}
    closed: dict[tuple[str, str], list[str]] = defaultdict(list)
    out: list[tuple[str, str, str]] = []
    for c in changes:
        job = jobs.get(c.job)
        cal = getattr(c, "calendar", "") or (
            calendars.resolve(job.calendar) if job and job.calendar else "?")
        if c.new_utc is not None:
            same_day = c.old_utc[:10] == c.new_utc[:10]
            old, new = (_hms(c.old_utc), _hms(c.new_utc)) if same_day else (c.old_utc, c.new_utc)
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} moved from {old} to {new}"))
            continue
        if job is None:
            out.append((cal, c.session, f"{c.session}: {c.job} is no longer in the config "
                                        f"(was due {c.old_utc})"))
            continue
        day = date.fromisoformat(c.session)
        if day in job.skip:
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} skipped by the config "
                                        f"(was due {c.old_utc})"))
            continue
        try:
            is_session = bool(calendar_sessions.sessions(cal, day, day,
                                                         calendar_overrides(config, cal)))
        except calendars.CalendarError:
            is_session = False
        if not is_session:
            closed[(cal, c.session)].append(f"{c.job} was due {c.old_utc}")
        elif job.sessions is not None:
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} no longer chosen by its "
                        f"session rule ({_moved_to(config, job, cal, day)}) (was due "
                        f"{c.old_utc})"))
        else:
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} no longer planned "
                                        f"(was due {c.old_utc})"))
    for (cal, session), dues in closed.items():
        out.append((cal, session, f"{cal} {session}: closed, was a session "
                                  f"({'; '.join(dues)})"))
    return sorted(out)


def _moved_to(config, job, cal: str, day: date) -> str:
    """"month end -2; now 2025-11-24": the rule, and the session it chooses nearest `day`."""
    try:
        chosen = selection.chosen(job, cal, day - timedelta(days=31), day + timedelta(days=31),
                                  calendar_overrides(config, cal)) or {}
    except calendars.CalendarError:
        chosen = {}
    near = min(chosen, key=lambda d: abs(d - day), default=None)
    return describe(job.sessions) + (f"; now {near}" if near is not None else "")


def grouped(diffs) -> dict[tuple[str, str], list[str]]:
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cal, session, text in diffs:
        groups[(cal, session)].append(text)
    return groups
