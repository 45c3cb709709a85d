"""What the plan says about an instant: which session it belongs to, and when a job ran or was due.

`PlanLookup.from_state(state_dir)` reads plan.json (written by sync: every planned fire) and the run
records (runrecord.all_records: when a run actually started); a replay builds one from a list of
fires. Both answer the two questions the rules ask.

An event's session (`session_of`), given the exchange calendar (the config's `calendar`, else its
first session job's), overrides applied:
* an instant within a session (open to close) is that session's;
* before the open, on a session's day (the exchange's local date): that session;
* otherwise (after a close, overnight, a weekend or holiday): the previous session.
Without a calendar (or past its data) it is the session of the plan's latest fire before it
within a day, else the UTC date. The calendar is read (exchange_calendars) only when an event
names no session of its own.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

DAY = timedelta(days=1)
WINDOW = timedelta(days=14)  # sessions read around an event's date (a holiday week fits)
log = logging.getLogger("market_timers.events")


def parse_at(text: str) -> datetime:
    """An event's or a record's instant ("...Z", with or without fractions)."""
    value = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"instant without a zone: {text!r}")
    return value


class PlanLookup:
    def __init__(self, fires: list[tuple[str, str, datetime]] | None = None,
                 calendar: str | None = None, override=None):
        """fires: (job, session, instant) — planned fires and actual starts alike; calendar:
        the exchange calendar whose sessions the events belong to (None: the plan's rule)."""
        self.fires = sorted(fires or [], key=lambda f: f[2])
        self.calendar, self.override = calendar, override
        self._sessions: dict[date, object] = {}  # label -> calendars.Session, loaded lazily
        self._loaded: tuple[date, date] | None = None

    @classmethod
    def from_state(cls, state_dir: str | Path, jobs: set[str] | None = None,
                   calendar: str | None = None, override=None) -> PlanLookup:
        state_dir = Path(state_dir)
        fires: list[tuple[str, str, datetime]] = []
        from market_timers.contracts import planfile
        from market_timers.ledger import runrecord

        try:
            plan = planfile.read(state_dir)
        except (OSError, ValueError):  # no plan: the run records still tell the sessions
            plan = None
        fires += [(e.job, e.session, e.instant) for e in plan.entries] if plan else []

        for job in sorted(jobs or ()):
            try:
                records = runrecord.all_records(state_dir, job)
            except (OSError, ValueError):
                continue
            for rec in records:
                try:
                    fires.append((job, str(rec["session"]), parse_at(rec["started_utc"])))
                except (ValueError, KeyError, TypeError):
                    continue
        return cls(fires, calendar, override)

    def session_of(self, at: datetime) -> str:
        """The calendar's session of `at` (the rule above), else the plan's."""
        if self.calendar:
            try:
                found = self._calendar_session(at)
            except ValueError:  # CalendarError: an unknown calendar, or beyond its data
                log.warning("events: no %s session for %s; the plan's is used", self.calendar,
                            at.isoformat())
                found = None
            if found is not None:
                return found
        best = None
        for _job, session, when in self.fires:
            if when > at:
                break
            if at - when <= DAY:
                best = session
        return best or at.astimezone(UTC).date().isoformat()

    def _calendar_session(self, at: datetime) -> str | None:
        from market_timers.schedule import calendar_sessions, calendars

        day = at.astimezone(UTC).date()
        if self._loaded is None or not (self._loaded[0] + WINDOW / 2 <= day
                                        <= self._loaded[1] - WINDOW / 2):
            start, end = day - WINDOW, day + WINDOW
            for s in calendar_sessions.sessions(self.calendar, start, end, self.override):
                self._sessions[s.label] = s
            self._loaded = (start, end)
        local = at.astimezone(calendars.tz(self.calendar)).date()
        previous = None
        for label in sorted(self._sessions):
            s = self._sessions[label]
            if s.open <= at < s.close or (label == local and at < s.open):
                return label.isoformat()
            if s.close <= at:
                previous = label
        return previous.isoformat() if previous else None

    def expected(self, job: str, at: datetime, within: int) -> bool:
        """A fire (or run) of `job` happened in [at - within, at]."""
        low = at - timedelta(seconds=within)
        return any(j == job and low <= when <= at for j, _s, when in self.fires)
