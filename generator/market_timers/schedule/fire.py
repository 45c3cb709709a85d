"""A Fire: one planned run of a job (job x session -> the exact UTC instant it fires), everything
the renderer, sync, the deadman and status need to know about it. Computed by plan.py only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import lru_cache

from market_timers.contracts import unitname
from market_timers.contracts.instants import iso
from market_timers.schedule import calendars, periodic
from market_timers.schema.durations import format_offset

DAILY = "at"  # the event of a job at a fixed UTC time; its calendar is "UTC"
_offset_text = lru_cache(maxsize=1024)(format_offset)  # a job's offset, once per plan, not per fire


@dataclass(frozen=True, order=True, slots=True)
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
    # Why the session was chosen by the job's session rule ("month end -2"); "": every session.
    why: str = field(default="", compare=False)

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
    def unit_name(self) -> unitname.UnitName:
        """Its units' name (unitname.py): a changed instant is a different unit."""
        if self.is_daily:
            return unitname.daily(self.job)
        if self.is_periodic:  # the slot list's digest: a changed list is a new unit
            return unitname.periodic(self.job, self.session, self.fire_utc,
                                     periodic.schedule_tag(self.calendar_lines()))
        return unitname.fire(self.job, self.session, self.fire_utc)

    @property
    def unit_stem(self) -> str:
        return self.unit_name.stem

    @property
    def fire_iso(self) -> str:
        utc = self.fire_utc
        if utc.tzinfo is not UTC:
            utc = utc.astimezone(UTC)
        if utc.microsecond or not 1000 <= utc.year <= 9999:
            return iso(utc)
        # iso()'s text (YYYY-MM-DDTHH:MM:SSZ) without strftime: a plan writes 100,000s of them
        return utc.isoformat(timespec="seconds")[:19] + "Z"

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
            "offset": _offset_text(self.offset),
            "fire_utc": self.fire_iso,
            "fire_local": local.isoformat(),
            "timezone": local.tzname(),
            "unit": self.unit_name.timer(),
            **(self.periodic_json() if self.is_periodic else {}),
            **({"selected": self.why} if self.why else {}),
        }

    def periodic_json(self) -> dict:
        """The schedule the runner, the deadman and status rebuild the slots from (slotclock)."""
        return {"every_sec": self.every, "first_utc": self.fire_iso,
                "last_utc": iso(self.last_utc), "slot_count": len(self.slots),
                "pause_utc": [iso(t) for t in self.pause] if self.pause else None}


def fire_order(fire: Fire) -> tuple:
    """Fire's own order (its fields in turn) as a key: sorting by key compares tuples in C, where
    the dataclass' __lt__ builds two tuples per comparison (seconds on a few 100,000 fires)."""
    return (fire.fire_utc, fire.job, fire.calendar, fire.session, fire.event, fire.offset)
