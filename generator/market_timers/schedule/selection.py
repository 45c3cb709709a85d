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

import bisect
import sys
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta

from market_timers.config.loader import Config, Job, Override
from market_timers.config.sessionrules import (
    SessionRule,
    attribute_text,
    counted_text,
    date_rule_text,
    describe,
)
from market_timers.schedule import calendar_sessions, calendars, weeks

# Days looked at around a window: a moved weekday's previous or next session, the neighbours that
# tell a closure of three days or more.
MARGIN = timedelta(days=40)
LONG_CLOSURE = timedelta(days=4)  # between two sessions' labels: closed three days or more
EXTRA = "extra"


@dataclass
class _View:
    """The sessions a rule is judged on (one calendar's, or the days several trade), with what
    the attribute filters ask of each."""

    labels: list[date]
    breaks: list[bool]  # the session has a midday break
    covered: tuple[date, date]  # the days the calendars' data covers
    weekmasks: object  # () -> (regular weekmask, special weekmasks) (a "week" rule asks)
    special: object  # () -> (early-close days, late-open days), built when a filter asks


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
        out = _counted_among_filtered(rule, view)
    elif rule is not None:
        picks = _date_rule(rule, view)
        out = _attributes(rule, picks, view)
    sessions = set(labels)
    for day in sorted(job.extra):
        if day in sessions:
            out.setdefault(day, EXTRA)
    return {d: why for d, why in sorted(out.items()) if start <= d <= end}


def _wide(rule: SessionRule | None, start: date, end: date) -> tuple[date, date]:
    """start..end grown to whole periods of the rule and by MARGIN."""
    s, e = start - MARGIN, end + MARGIN
    if rule is not None and rule.period is not None:
        s = min(s, _period_bounds(rule.period, start)[0])
        e = max(e, _period_bounds(rule.period, end)[1])
    return s, e


def _view(calendar: str, start: date, end: date, override: Override | None) -> _View:
    table = calendar_sessions.session_table(calendar, start, end, override)
    return _View([date.fromordinal(calendar_sessions.EPOCH_DAY + d) for d in table.days.tolist()],
                 [b != calendar_sessions.NO_TIME for b in table.seconds["break_start"].tolist()],
                 _covered(calendar, start, end),
                 lambda: calendars.weekmasks(calendar, start, end),
                 lambda: calendar_sessions.special_days(calendar, start, end, override))


def _joint_view(job: Job, start: date, end: date, overrides: dict) -> _View:
    sessions = joint_sessions(job, start, end, overrides)
    cals = [calendars.resolve(c) for c in job.calendars]
    spans = [_covered(c, start, end) for c in cals]

    def special():
        per = {c: calendar_sessions.special_days(c, start, end, overrides.get(c)) for c in cals}
        return (frozenset(s.label for s in sessions if s.label in per[s.calendar][0]),
                frozenset(s.label for s in sessions if s.label in per[s.calendar][1]))

    return _View([s.label for s in sessions], [s.break_start is not None for s in sessions],
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


def _period_bounds(period: str, day: date) -> tuple[date, date]:
    """First and last day of the period holding `day`. A week here is Monday to Sunday, near
    enough for _wide (MARGIN covers any trading week); a rule's weeks are _weeks'."""
    if period == "week":
        first = day - timedelta(days=day.weekday())
        return first, first + timedelta(days=6)
    if period == "year":
        return date(day.year, 1, 1), date(day.year, 12, 31)
    months = 3 if period == "quarter" else 1
    m0 = (day.month - 1) // months * months + 1
    first = date(day.year, m0, 1)
    nxt = date(day.year + (m0 + months > 12), (m0 + months - 1) % 12 + 1, 1)
    return first, nxt - timedelta(days=1)


def _date_rule(rule: SessionRule, view: _View) -> dict[date, str]:
    if rule.period is not None:
        return _nth_of_period(rule, view)
    if rule.weekday is not None:
        return _nth_weekday(rule, view.labels, view.covered)
    why = describe(rule)
    return {d: why for d in view.labels if not rule.months or d.month in rule.months}


def _nth_of_period(rule: SessionRule, view: _View) -> dict[date, str]:
    covered = view.covered
    if rule.period == "week":
        groups = _weeks(view)
    else:
        groups = {}
        for d in view.labels:
            groups.setdefault(_period_bounds(rule.period, d), []).append(d)
    why = date_rule_text(rule)
    out = {}
    for (first, last), days in groups.items():
        if first < covered[0] or last > covered[1] or rule.offset >= len(days):
            continue  # a period the data does not wholly cover is unknown
        day = days[-1 - rule.offset] if rule.from_end else days[rule.offset]
        if not rule.months or day.month in rule.months:
            out[day] = why
    return out


def _weeks(view: _View) -> dict[tuple[date, date], list[date]]:
    """The view's sessions by trading week (first and last day of each). A session whose week's
    start or end is not known (beyond the view's days) is left out."""
    if not view.labels:
        return {}
    regular, specials = view.weekmasks()
    # a week is at most a few days longer than seven (at a change of trading week): a fortnight
    # either side finds the start and the end of the first and the last session's weeks
    starts = weeks.week_starts(regular, specials, view.labels[0] - timedelta(days=14),
                               view.labels[-1] + timedelta(days=15))
    groups: dict[tuple[date, date], list[date]] = {}
    for d in view.labels:
        i = bisect.bisect_right(starts, d)
        if 0 < i < len(starts):
            groups.setdefault((starts[i - 1], starts[i] - timedelta(days=1)), []).append(d)
    return groups


def nth_weekday(year: int, month: int, weekday: int, nth: int) -> date | None:
    """The nth (1..5; -1..-5 from the end) weekday of a month, or None when it has fewer."""
    first = date(year, month, 1)
    last = _period_bounds("month", first)[1]
    if nth > 0:
        day = first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (nth - 1))
    else:
        day = last - timedelta(days=(last.weekday() - weekday) % 7 + 7 * (-nth - 1))
    return day if first <= day <= last else None


def _nth_weekday(rule: SessionRule, labels: list[date], covered: tuple[date, date]
                 ) -> dict[date, str]:
    sessions = set(labels)
    text = date_rule_text(rule)
    out: dict[date, str] = {}
    y, m = labels[0].year if labels else covered[0].year, labels[0].month if labels else 1
    stop = (covered[1].year, covered[1].month)
    while (y, m) <= stop:
        day = nth_weekday(y, m, rule.weekday, rule.nth)
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
        if day is None or (rule.months and day.month not in rule.months):
            continue
        if not covered[0] <= day <= covered[1]:
            continue
        if day in sessions:
            out[day] = text
            continue
        if rule.if_closed == "none":
            continue
        i = bisect.bisect_left(labels, day)
        moved = labels[i - 1] if rule.if_closed == "previous" and i > 0 else \
            labels[i] if rule.if_closed == "next" and i < len(labels) else None
        if moved is not None and covered[0] <= moved <= covered[1]:
            out.setdefault(moved, f"{text} ({day} closed: {rule.if_closed} session)")
    return out


def _attributes(rule: SessionRule, picks: dict[date, str], view: _View) -> dict[date, str]:
    """The picks that pass every attribute filter of the rule, the holding ones said in why."""
    if not rule.attributes:
        return picks
    labels, breaks = view.labels, view.breaks
    index = {d: i for i, d in enumerate(labels)}
    early = late = frozenset()
    if any(k in ("early_close", "late_open") for k, _ in rule.attributes):
        early, late = view.special()

    def has(key: str, day: date) -> bool:
        i = index[day]
        if key == "early_close":
            return day in early
        if key == "late_open":
            return day in late
        if key == "break":
            return breaks[i]
        if key == "after_closure":
            return i > 0 and day - labels[i - 1] >= LONG_CLOSURE
        return i + 1 < len(labels) and labels[i + 1] - day >= LONG_CLOSURE  # before_closure

    out = {}
    for day, why in picks.items():
        if all(has(key, day) == (choice == "only") for key, choice in rule.attributes):
            said = [attribute_text(k, c) for k, c in rule.attributes if c == "only"]
            if rule.period is None and rule.weekday is None:
                out[day] = describe(rule)
            else:
                out[day] = ", ".join([why, *said])
    return out


def _counted_among_filtered(rule: SessionRule, view: _View) -> dict[date, str]:
    """count_among = "filtered": the period's nth of the sessions every filter keeps (November
    2025's last XNYS session without an early close: 11-26, not the half day 11-28)."""
    kept = set(_attributes(rule, dict.fromkeys(view.labels, ""), view))
    index = [i for i, d in enumerate(view.labels) if d in kept]
    filtered = replace(view, labels=[view.labels[i] for i in index],
                       breaks=[view.breaks[i] for i in index])
    return dict.fromkeys(_date_rule(rule, filtered), counted_text(rule))


# the config's warnings ------------------------------------------------------------------------

def warnings(config: Config, now: datetime) -> list[str]:
    """A rule that chooses no session in the year from `now` (the job would never run): one line
    naming the rule's key. A calendar that cannot be planned is the planner's to report."""
    from market_timers.schedule.plan import job_overrides  # plan imports selection: a cycle

    raw_jobs = config.raw.get("job", []) if isinstance(config.raw.get("job"), list) else []
    where = {t.get("name"): i for i, t in enumerate(raw_jobs) if isinstance(t, dict)}
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
            key = f"job[{where.get(job.name, '?')}].sessions"
            out.append(f"{key}: the rule ({describe(job.sessions)}) selects no session of {cal} "
                       f"from {first} to {last}: {job.name} would never run")
    return out


def print_warnings(config: Config, now: datetime, stream=None) -> None:
    for line in warnings(config, now):
        print(f"{config.source}: warning: {line}", file=stream or sys.stderr)
