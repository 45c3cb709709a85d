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


def plan_between(config: Config, start: date, end: date) -> list[Fire]:
    """Every fire of every job for sessions (days, for `at` jobs) labelled start..end."""
    fires: list[Fire] = []
    for job in config.jobs:
        if not job.is_session_job:
            fires.extend(daily_fires(job, start, end))
            continue
        cal = calendars.resolve(job.calendar)
        sess = calendars.sessions(cal, start, end, _override(config, cal))
        fires.extend(fires_for_sessions(job, sess))
    return sorted(fires)


def plan_ahead(config: Config, now: datetime, horizon: int | None = None) -> list[Fire]:
    """Fires still to come in the next `horizon` sessions of each job's calendar."""
    horizon = horizon or config.horizon
    fires: list[Fire] = []
    cache: dict[str, list[calendars.Session]] = {}
    for job in config.jobs:
        if not job.is_session_job:
            fires.extend(f for f in daily_fires(job, now.date(), (now + timedelta(days=horizon))
                                                .date()) if f.fire_utc > now)
            continue
        cal = calendars.resolve(job.calendar)
        if cal not in cache:
            # Look back a day so that a job after the close of the current session is kept.
            cache[cal] = calendars.next_sessions(cal, now - timedelta(days=1), horizon + 1,
                                                 _override(config, cal))
        fires.extend(f for f in fires_for_sessions(job, cache[cal]) if f.last_utc > now)
    return _within_horizon(sorted(fires), horizon)


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
