"""Which sessions a job runs on: its `[job.sessions]` rule and `extra` dates (config/sessionrules.py)
applied to its calendar's sessions, each chosen session with why ("month end -2").

The plan asks `chosen()` for the sessions of a window; everything downstream (the units, sync,
plan.json, so the dead-man, status, the digest and the metrics) sees only the fires of chosen
sessions. A rule is judged on the calendar's sessions with the config's overrides applied, in the
exchange's own dates (session labels): a period is the exchange's trading week by the weekmask in
force on the label's date (schedule/weeks.py), or the month, quarter or year of the label. A
period or a neighbour the calendar's data does not cover is unknown: nothing is chosen from it
rather than a wrong session.
"""

from __future__ import annotations

import sys
from datetime import date, datetime, timedelta

from market_timers.config.jobpath import paths_by_name
from market_timers.config.loader import Config, Job, Override
from market_timers.config.sessionrules import (
    SessionRule,
    describe,
)
from market_timers.schedule import calendar_sessions, calendars
from market_timers.schedule.ruledays import (
    SessionView,
    attribute_days,
    counted_among_filtered,
    date_rule_days,
    period_bounds,
)

# Days looked at around a window: a moved weekday's previous or next session, the neighbours that
# tell a closure of three days or more.
MARGIN = timedelta(days=40)
EXTRA = "extra"


def chosen(job: Job, calendar: str, start: date, end: date, override=None
           ) -> dict[date, str] | None:
    """The job's sessions labelled start..end with why each is chosen, or None when the job
    runs on every session (no rule, no extra date). `skip` is the plan's to apply. `override`:
    the calendar's [overrides] table; for a job on several `calendars`, a dict of them by
    canonical name (`calendar` is then unused)."""
    if not job.selects:
        return None
    rule = job.sessions
    wide_start, wide_end = _wide(rule, start, end)
    view = (_joint_view(job, wide_start, wide_end, override or {}) if job.calendars
            else _view(calendar, wide_start, wide_end, override))
    labels = view.labels
    out: dict[date, str] = {}
    if rule is not None and rule.count_among == "filtered":
        out = counted_among_filtered(rule, view)
    elif rule is not None:
        picks = date_rule_days(rule, view)
        out = attribute_days(rule, picks, view)
    sessions = set(labels)
    for day in sorted(job.extra):
        if day in sessions:
            out.setdefault(day, EXTRA)
    return {d: why for d, why in sorted(out.items()) if start <= d <= end}


def _wide(rule: SessionRule | None, start: date, end: date) -> tuple[date, date]:
    """start..end grown to whole periods of the rule and by MARGIN."""
    s, e = start - MARGIN, end + MARGIN
    if rule is not None and rule.period is not None:
        s = min(s, period_bounds(rule.period, start)[0])
        e = max(e, period_bounds(rule.period, end)[1])
    return s, e


def _view(calendar: str, start: date, end: date, override: Override | None) -> SessionView:
    table = calendar_sessions.session_table(calendar, start, end, override)
    labels = [date.fromordinal(calendar_sessions.EPOCH_DAY + d) for d in table.days.tolist()]
    breaks = [b != calendar_sessions.NO_TIME for b in table.seconds["break_start"].tolist()]
    return SessionView(labels, breaks, _covered(calendar, start, end),
                       lambda: calendars.weekmasks(calendar, start, end),
                       lambda: calendar_sessions.special_days(calendar, start, end, override))


def _joint_view(job: Job, start: date, end: date, overrides: dict) -> SessionView:
    sessions = joint_sessions(job, start, end, overrides)
    cals = [calendars.resolve(c) for c in job.calendars]
    spans = [_covered(c, start, end) for c in cals]

    def special():
        per = {c: calendar_sessions.special_days(c, start, end, overrides.get(c)) for c in cals}
        return (frozenset(s.label for s in sessions if s.label in per[s.calendar][0]),
                frozenset(s.label for s in sessions if s.label in per[s.calendar][1]))

    return SessionView([s.label for s in sessions], [s.break_start is not None for s in sessions],
                       (max(a for a, _ in spans), min(b for _, b in spans)),
                       lambda: calendars.weekmasks(cals[0], start, end), special)


def joint_sessions(job: Job, start: date, end: date, overrides: dict
                   ) -> list[calendars.Session]:
    """A job on several `calendars`: one session per day labelled start..end on which all (or
    any) of them trade: the session of the calendar whose event the job takes that day
    (`event_from`: a calendar, or the earliest / latest of the open ones' events)."""
    cals = [calendars.resolve(c) for c in job.calendars]
    per = {c: {s.label: s for s in calendar_sessions.sessions(c, start, end, overrides.get(c))}
           for c in cals}
    days = set.intersection(*(set(p) for p in per.values())) if job.open_on == "all" else \
        set.union(*(set(p) for p in per.values()))
    return [_deciding(job, [per[c][d] for c in cals if d in per[c]]) for d in sorted(days)]


def _deciding(job: Job, open_sessions: list[calendars.Session]) -> calendars.Session:
    if job.event_from in ("earliest", "latest"):
        timed = [s for s in open_sessions if s.event(job.event) is not None]
        if not timed:
            return open_sessions[0]  # no such event that day (no break): the plan drops it
        pick = min if job.event_from == "earliest" else max
        return pick(timed, key=lambda s: s.event(job.event))
    named = calendars.resolve(job.event_from)
    return next(s for s in open_sessions if s.calendar == named)


def decision(job: Job, session: calendars.Session) -> str:
    """"XNYS+XLON open, earliest close: XLON": why a day of a job on several calendars, and
    whose event (the plan's WHY, the unit's description)."""
    cals = [calendars.resolve(c) for c in job.calendars]
    days = ("+".join(cals) if job.open_on == "all" else " or ".join(cals)) + " open"
    if job.event_from in ("earliest", "latest"):
        return f"{days}, {job.event_from} {job.event}: {session.calendar}"
    return f"{days}, {session.calendar} {job.event}"


def _covered(calendar: str, start: date, end: date) -> tuple[date, date]:
    """The part of start..end that market-timers plans and the calendar's data covers."""
    lo, hi = calendars.supported_range()
    first, last = calendars.data_limits(calendar)
    return max(start, lo, first or lo), min(end, hi, last or hi)


# the config's warnings ------------------------------------------------------------------------

def warnings(config: Config, now: datetime) -> list[str]:
    """A rule that chooses no session in the year from `now` (the job would never run): one line
    naming the rule's key. A calendar that cannot be planned is the planner's to report."""
    from market_timers.schedule.plan import job_overrides  # plan imports selection: a cycle

    raw_jobs = config.raw.get("job", []) if isinstance(config.raw.get("job"), list) else []
    where = paths_by_name(raw_jobs)
    out = []
    start = now.date()
    for job in config.jobs:
        if job.sessions is None or not job.is_session_job:
            continue
        try:
            cal = calendars.resolve(job.calendar)
            first, last = _covered(cal, start, start + timedelta(days=366))
            if last < first:
                continue
            if job.calendars:
                spans = [_covered(calendars.resolve(c), start, start + timedelta(days=366))
                         for c in job.calendars]
                first, last = max(a for a, _ in spans), min(b for _, b in spans)
                cal = "+".join(calendars.resolve(c) for c in job.calendars)
                if last < first:
                    continue
            picked = chosen(job, cal, first, last, job_overrides(config, job))
        except calendars.CalendarError:
            continue
        if not set(picked or {}) - job.skip:
            key = f"{where.get(job.name, 'job.' + job.name)}.sessions"
            out.append(f"{key}: the rule ({describe(job.sessions)}) selects no session of {cal} "
                       f"from {first} to {last}: {job.name} would never run")
    return out


def print_warnings(config: Config, now: datetime, stream=None) -> None:
    for line in warnings(config, now):
        print(f"{config.source}: warning: {line}", file=stream or sys.stderr)
