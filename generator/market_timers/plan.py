"""The plan: job x session -> the exact UTC instant it fires.

A Fire is everything the renderer, sync, the deadman and status need to know about one planned
run; it is computed here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from . import calendars, periodic
from .config import Config, Job
from .durations import format_offset
from .instants import iso

DAILY = "at"  # the event of a job at a fixed UTC time; its calendar is "UTC"


@dataclass(frozen=True, order=True)
class Fire:
    fire_utc: datetime  # aware UTC, exact to the second
    job: str
    calendar: str
    session: date
    event: str
    offset: int
    # A periodic job's (job, session): fire_utc is its first slot; every slot, the period and the
    # paused break (periodic.py). One timer covers them all.
    slots: tuple[datetime, ...] = field(default=(), compare=False)
    every: int = field(default=0, compare=False)
    pause: tuple[datetime, datetime] | None = field(default=None, compare=False)

    @property
    def is_daily(self) -> bool:
        return self.event == DAILY

    @property
    def is_periodic(self) -> bool:
        return self.every > 0

    @property
    def last_utc(self) -> datetime:
        """The last instant the fire's timer elapses (its only one, unless periodic)."""
        return self.slots[-1] if self.slots else self.fire_utc

    def calendar_lines(self) -> list[str]:
        return periodic.calendar_lines(list(self.slots))

    @property
    def instance(self) -> str:
        """<session>-<HHMMSS of the UTC instant>: a changed instant is a different unit."""
        if self.is_daily:
            return "daily"
        if self.is_periodic:  # the slot list's digest: a changed list is a new unit
            return (f"{self.session.isoformat()}-{self.fire_utc:%H%M%S}-"
                    f"{periodic.schedule_tag(self.calendar_lines())}")
        return f"{self.session.isoformat()}-{self.fire_utc:%H%M%S}"

    @property
    def unit_stem(self) -> str:
        return f"market-{self.job}@{self.instance}"

    @property
    def fire_iso(self) -> str:
        return iso(self.fire_utc)

    def local(self) -> datetime:
        if self.is_daily:
            return self.fire_utc
        return self.fire_utc.astimezone(calendars.tz(self.calendar))

    def to_json(self) -> dict:
        local = self.local()
        return {
            "job": self.job,
            "calendar": self.calendar,
            "session": self.session.isoformat(),
            "event": self.event,
            "offset": format_offset(self.offset),
            "fire_utc": self.fire_iso,
            "fire_local": local.isoformat(),
            "timezone": local.tzname(),
            "unit": self.unit_stem + ".timer",
            **(self.periodic_json() if self.is_periodic else {}),
        }

    def periodic_json(self) -> dict:
        """The schedule the runner, the deadman and status rebuild the slots from (slotclock)."""
        return {"every_sec": self.every, "first_utc": self.fire_iso,
                "last_utc": iso(self.last_utc), "slot_count": len(self.slots),
                "pause_utc": [iso(t) for t in self.pause] if self.pause else None}


def fires_for_sessions(job: Job, sessions: list[calendars.Session]) -> list[Fire]:
    out = []
    for s in sessions:
        if s.label in job.skip:
            continue
        if job.periodic is not None:
            out.extend(_periodic_fire(job, s))
            continue
        instant = s.event(job.event)
        if instant is None:  # no break that day
            continue
        out.append(Fire(instant + timedelta(seconds=job.offset), job.name, s.calendar, s.label,
                        job.event, job.offset))
    return out


def _periodic_fire(job: Job, s: calendars.Session) -> list[Fire]:
    slots = periodic.session_slots(s, job.periodic)
    if not slots:  # an empty window that day (e.g. an early close before `from`)
        return []
    return [Fire(slots[0], job.name, s.calendar, s.label, job.event, job.offset,
                 slots=tuple(slots), every=job.periodic.every,
                 pause=periodic.pause(s, job.periodic))]


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
    out: dict[str, list[Job]] = {}
    for job in config.jobs:
        if job.is_session_job:
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


def plan_between_partial(config: Config, start: date, end: date) -> Plan:
    """Every fire of every job for sessions (days, for `at` jobs) labelled start..end; a calendar
    whose data stops before `end` plans what it has and is reported as a failure too."""
    def fires_of(cal: str, jobs: list[Job]) -> list[Fire]:
        sess = calendars.sessions(cal, start, end, _override(config, cal))
        out = [f for job in jobs for f in fires_for_sessions(job, sess)]
        stop = calendars.covered_until(cal, end)
        if stop is not None:
            missing.append(CalendarFailure(cal, tuple(j.name for j in jobs), (
                f"exchange_calendars {calendars.version()} records {cal}'s holidays up to "
                f"{stop} only: nothing is planned after it (asked up to {end})")))
        return out

    missing: list[CalendarFailure] = []
    result = _plan_each(config, fires_of)
    for job in config.jobs:
        if not job.is_session_job:
            result.fires.extend(daily_fires(job, start, end))
    result.fires.sort()
    result.failures.extend(missing)
    return result


def plan_between(config: Config, start: date, end: date) -> list[Fire]:
    """plan_between_partial, raising CalendarError when any calendar failed."""
    return _strict(plan_between_partial(config, start, end))


def plan_ahead_partial(config: Config, now: datetime, horizon: int | None = None) -> Plan:
    """Fires still to come in the next `horizon` sessions of each job's calendar."""
    horizon = horizon or config.horizon

    def fires_of(cal: str, jobs: list[Job]) -> list[Fire]:
        # Look back a day so that a job after the close of the current session is kept.
        sess = calendars.next_sessions(cal, now - timedelta(days=1), horizon + 1,
                                       _override(config, cal))
        # last_utc: a periodic job's session stays planned until its last slot has passed
        return [f for job in jobs for f in fires_for_sessions(job, sess) if f.last_utc > now]

    result = _plan_each(config, fires_of)
    for job in config.jobs:
        if not job.is_session_job:
            result.fires.extend(f for f in daily_fires(job, now.date(), (
                now + timedelta(days=horizon)).date()) if f.fire_utc > now)
    result.fires = _within_horizon(sorted(result.fires), horizon)
    return result


def plan_ahead(config: Config, now: datetime, horizon: int | None = None) -> list[Fire]:
    """plan_ahead_partial, raising CalendarError when any calendar failed."""
    return _strict(plan_ahead_partial(config, now, horizon))


def _strict(result: Plan) -> list[Fire]:
    if result.failures:
        raise calendars.CalendarError("; ".join(f.line() for f in result.failures))
    return result.fires


def _within_horizon(fires: list[Fire], horizon: int) -> list[Fire]:
    """Keep the first `horizon` sessions per calendar (counting sessions that still fire)."""
    keep: dict[str, list[date]] = {}
    for f in fires:
        labels = keep.setdefault(f.calendar, [])
        if f.session not in labels:
            labels.append(f.session)
    allowed = {(cal, d) for cal, labels in keep.items() for d in sorted(labels)[:horizon]}
    return [f for f in fires if (f.calendar, f.session) in allowed]


def _override(config: Config, canonical: str):
    for name, override in config.overrides.items():
        if calendars.resolve(name) == canonical:
            return override
    return None


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)
