"""The plan: job x session -> the exact UTC instant it fires.

A Fire (fire.py) is everything the renderer, sync, the deadman and status need to know about one
planned run; it is computed here and nowhere else (over whole columns: firecolumns.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

from market_timers.config.loader import Config, Job
from market_timers.schedule import calendar_sessions, calendars, periodic, selection
from market_timers.schedule.fire import DAILY, Fire, fire_order
from market_timers.schedule.firecolumns import FireColumns, daily_columns, session_columns

# Names callers take from here (the plan's types moved beside it).
__all__ = ["DAILY", "Fire", "FireColumns", "fire_order"]


def fires_for_sessions(job: Job, sessions: list[calendars.Session], override=None,
                       after=None) -> list[Fire]:
    """The job's fires on those of `sessions` (consecutive, in order) its rule chooses
    (selection.py; all without one) and not skipped. `override`: the calendar's [overrides]
    table, which the rule sees too. `after(session)`: the session that follows the last one (or
    None), for a periodic job's slot shared with the next session: the calendar's next session,
    whether the rule chooses it or not (periodic.py)."""
    following = {}
    if job.periodic is not None and sessions:
        nexts = [*sessions[1:], after(sessions[-1]) if after else None]
        following = {s.label: n for s, n in zip(sessions, nexts, strict=True)}
    chosen = _chosen(job, sessions, override)
    if chosen is not None:
        sessions = [s for s in sessions if s.label in chosen]
    why = chosen or {}
    if job.calendars:  # several exchanges: say whose event each day took
        why = {s.label: ", ".join(filter(None, (why.get(s.label), selection.decision(job, s))))
               for s in sessions}
    if job.periodic is not None:  # one Fire per session holding its slots (periodic.py)
        return [f for s in sessions if s.label not in job.skip
                for f in _periodic_fire(job, s, following.get(s.label), why.get(s.label, ""))]
    offset, skip, event = timedelta(seconds=job.offset), job.skip, job.event
    return [Fire(instant + offset, job.name, s.calendar, s.label, event, job.offset,
                 why=why.get(s.label, ""))
            for s in sessions
            if (instant := s.event(event)) is not None  # None: no break that day
            and s.label not in skip]


def _chosen(job: Job, sessions: list[calendars.Session], override) -> dict[date, str] | None:
    if not job.selects or not sessions:
        return None
    return selection.chosen(job, sessions[0].calendar, sessions[0].label, sessions[-1].label,
                            override)


def _periodic_fire(job: Job, s: calendars.Session, following: calendars.Session | None,
                   why: str = "") -> list[Fire]:
    slots = periodic.session_slots(s, job.periodic, following)
    if not slots:  # an empty window that day (e.g. an early close before `from`)
        return []
    return [Fire(slots[0], job.name, s.calendar, s.label, job.event, job.offset,
                 slots=tuple(slots), every=job.periodic.every,
                 pause=periodic.pause(s, job.periodic), why=why)]


def daily_fires(job: Job, start: date, end: date) -> list[Fire]:
    """A fixed-UTC-time job's fire on each day start..end (one unit serves them all)."""
    days = (end - start).days + 1
    return [Fire(datetime.combine(start + timedelta(days=i), job.at_utc, tzinfo=UTC), job.name,
                 "UTC", start + timedelta(days=i), DAILY, 0) for i in range(max(days, 0))]


@dataclass(frozen=True)
class CalendarFailure:
    """A calendar that could not be planned: only its own jobs are left out."""

    calendar: str
    jobs: tuple[str, ...]
    reason: str

    def line(self) -> str:
        return f"calendar {self.calendar} (job {', '.join(self.jobs)}): {self.reason}"


@dataclass
class Plan:
    fires: list[Fire]
    failures: list[CalendarFailure]

    def failed_jobs(self) -> set[str]:
        return {j for f in self.failures for j in f.jobs}


def _by_calendar(config: Config) -> dict[str, list[Job]]:
    """The session jobs of each calendar (a job on several `calendars` is planned alone)."""
    out: dict[str, list[Job]] = {}
    for job in config.jobs:
        if job.is_session_job and not job.calendars:
            out.setdefault(calendars.resolve(job.calendar), []).append(job)
    return out


def _plan_each(config: Config, fires_of) -> Plan:
    """fires_of(calendar, jobs) for each calendar in turn: one that fails (exchange_calendars
    cannot build it, its data has ended) costs only its own jobs."""
    fires: list[Fire] = []
    failures: list[CalendarFailure] = []
    for cal, jobs in sorted(_by_calendar(config).items()):
        try:
            fires.extend(fires_of(cal, jobs))
        except Exception as e:  # noqa: BLE001 - any failure of one calendar is reported
            reason = str(e).removeprefix(f"{cal}: ") if isinstance(
                e, calendars.CalendarError) else f"planning failed: {type(e).__name__}: {e}"
            failures.append(CalendarFailure(cal, tuple(j.name for j in jobs), reason))
    return Plan(fires, failures)


def plan_between_columns(config: Config, start: date, end: date
                         ) -> tuple[FireColumns, list[CalendarFailure]]:
    """Every fire of every job for sessions (days, for `at` jobs) labelled start..end, computed
    over whole columns; a calendar whose data stops before `end` plans what it has and is
    reported as a failure too."""
    index = {job.name: i for i, job in enumerate(config.jobs)}
    jobs = [(job.name, calendars.resolve(job.calendar) if job.is_session_job else "UTC",
             job.event if job.is_session_job else DAILY,
             job.offset if job.is_session_job else 0) for job in config.jobs]

    def fires_of(cal: str, cal_jobs: list[Job]) -> list[tuple]:
        override = calendar_overrides(config, cal)
        table = calendar_sessions.session_table(cal, start, end, override)
        out = []
        for job in cal_jobs:
            chosen = selection.chosen(job, cal, start, end, override)
            if chosen is not None:
                chosen = why[index[job.name]] = {
                    d.toordinal() - calendar_sessions.EPOCH_DAY: text for d, text in chosen.items()}
            out.append(session_columns(index[job.name], job, table, chosen))
        stop = calendar_sessions.covered_until(cal, end)
        if stop is not None:
            missing.append(CalendarFailure(cal, tuple(j.name for j in cal_jobs), (
                f"exchange_calendars {calendars.version()} records {cal}'s holidays up to "
                f"{stop} only: nothing is planned after it (asked up to {end})")))
        return out

    missing: list[CalendarFailure] = []
    why: dict[int, dict[int, str]] = {}
    result = _plan_each(config, fires_of)
    chunks = result.fires + [daily_columns(index[job.name], job, start, end)
                             for job in config.jobs if not job.is_session_job]
    return FireColumns(jobs, chunks, why), result.failures + missing


def planned_alone(job: Job) -> bool:
    """A job plan_between_columns leaves out: periodic (its fires hold their slots) or on
    several calendars; plan_between_partial plans it session by session."""
    return job.periodic is not None or bool(job.calendars)


def plan_between_partial(config: Config, start: date, end: date) -> Plan:
    """plan_between_columns as a Plan (a list of Fire); periodic jobs and jobs on several
    calendars are planned session by session beside the columns."""
    alone = [j for j in config.jobs if planned_alone(j)]
    if alone:
        columns_config = replace(config, jobs=[j for j in config.jobs if not planned_alone(j)])
    else:
        columns_config = config
    columns, failures = plan_between_columns(columns_config, start, end)
    fires = list(columns)
    for job in alone:
        try:
            fires.extend(fires_for_sessions(job, _job_sessions(config, job, start, end),
                                            job_overrides(config, job), _follower(config, job)))
        except calendars.CalendarError as e:
            failures.append(CalendarFailure(_job_calendar(job), (job.name,), str(e)))
    return Plan(sorted(fires) if alone else fires, failures)


def _job_calendar(job: Job) -> str:
    """The calendar a failure names: a job on several calendars names them all."""
    return "+".join(calendars.resolve(c) for c in job.all_calendars)


def _job_sessions(config: Config, job: Job, start: date, end: date) -> list[calendars.Session]:
    if job.calendars:
        return selection.joint_sessions(job, start, end, job_overrides(config, job))
    cal = calendars.resolve(job.calendar)
    return calendar_sessions.sessions(cal, start, end, calendar_overrides(config, cal))


def _follower(config: Config, job: Job):
    """The session after a list's last one, for a periodic job's shared slot (single calendar
    only: a job on several calendars has no one next session)."""
    if job.calendars:
        return None
    cal = calendars.resolve(job.calendar)
    return calendar_sessions.follower(cal, calendar_overrides(config, cal))


def job_overrides(config: Config, job: Job):
    """The [overrides] a job's sessions see: its calendar's, or for a job on several calendars
    a dict of them by canonical name."""
    if job.calendars:
        return {c: calendar_overrides(config, c)
                for c in (calendars.resolve(n) for n in job.calendars)}
    return calendar_overrides(config, calendars.resolve(job.calendar))


def plan_between(config: Config, start: date, end: date) -> list[Fire]:
    """plan_between_partial, raising CalendarError when any calendar failed."""
    return _strict(plan_between_partial(config, start, end))


def plan_ahead_partial(config: Config, now: datetime, horizon: int | None = None) -> Plan:
    """Fires still to come in the next `horizon` sessions of each job's calendar."""
    horizon = horizon or config.horizon

    def fires_of(cal: str, jobs: list[Job]) -> list[Fire]:
        _, last = calendars.data_limits(cal)
        if last is not None and last < now.date():  # its data has ended (named with now)
            raise calendar_sessions.none_after(cal, now, last)
        # Look back a day so that a job after the close of the current session is kept.
        override = calendar_overrides(config, cal)
        sess = calendar_sessions.next_sessions(cal, now - timedelta(days=1), horizon + 1, override)
        # last_utc: a periodic job's session stays planned until its last slot has passed
        after = calendar_sessions.follower(cal, override)
        fires = [f for job in jobs for f in fires_for_sessions(job, sess, override, after)
                 if f.last_utc > now]
        if not fires and last is not None and not any(s.close > now for s in sess):
            # its data ran out today: said, never an empty plan (a rule that chooses none of
            # the sessions left is not that)
            raise calendar_sessions.none_after(cal, now, last)
        return fires

    result = _plan_each(config, fires_of)
    for job in config.jobs:
        if job.is_session_job and job.calendars:
            try:
                result.fires.extend(_several_ahead(config, job, now, horizon))
            except Exception as e:  # noqa: BLE001 - as _plan_each: only this job is lost
                result.failures.append(CalendarFailure(_job_calendar(job), (job.name,), str(e)))
    for job in config.jobs:
        if not job.is_session_job:
            result.fires.extend(f for f in daily_fires(job, now.date(), (
                now + timedelta(days=horizon)).date()) if f.fire_utc > now)
    result.fires = _within_horizon(sorted(result.fires, key=fire_order), horizon)
    return result


def _several_ahead(config: Config, job: Job, now: datetime, horizon: int) -> list[Fire]:
    """A job on several calendars: its fires on the days they trade in the next `horizon`
    sessions of any of them (the horizon then keeps the first `horizon`)."""
    overrides = job_overrides(config, job)
    ends = [calendar_sessions.next_sessions(c, now - timedelta(days=1), horizon + 1, o)[-1].label
            for c, o in overrides.items()]
    sess = selection.joint_sessions(job, (now - timedelta(days=2)).date(), max(ends), overrides)
    return [f for f in fires_for_sessions(job, sess, overrides) if f.last_utc > now]


def plan_ahead(config: Config, now: datetime, horizon: int | None = None) -> list[Fire]:
    """plan_ahead_partial, raising CalendarError when any calendar failed."""
    return _strict(plan_ahead_partial(config, now, horizon))


def _strict(result: Plan) -> list[Fire]:
    if result.failures:
        raise calendars.CalendarError("; ".join(f.line() for f in result.failures))
    return result.fires


def _within_horizon(fires: list[Fire], horizon: int) -> list[Fire]:
    """Keep the first `horizon` sessions per calendar (counting sessions that still fire)."""
    keep: dict[str, set[date]] = {}
    for f in fires:
        keep.setdefault(f.calendar, set()).add(f.session)
    allowed = {(cal, d) for cal, labels in keep.items() for d in sorted(labels)[:horizon]}
    return [f for f in fires if (f.calendar, f.session) in allowed]


def calendar_overrides(config: Config, canonical: str):
    for name, override in config.overrides.items():
        if calendars.resolve(name) == canonical:
            return override
    return None
