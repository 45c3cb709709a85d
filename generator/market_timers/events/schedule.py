"""What the plan says about an instant: which session it belongs to, and when a job ran or was due.

`Schedule.from_state(state_dir)` reads plan.json (written by sync: every planned fire) and the run
records (runrecord.all_records: when a run actually started); a replay builds one from a list of
fires. Both answer the two questions the rules ask.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

DAY = timedelta(days=1)


def parse_at(text: str) -> datetime:
    """An event's or a record's instant ("...Z", with or without fractions)."""
    value = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"instant without a zone: {text!r}")
    return value


class Schedule:
    def __init__(self, fires: list[tuple[str, str, datetime]] | None = None):
        """fires: (job, session, instant) — planned fires and actual starts alike."""
        self.fires = sorted(fires or [], key=lambda f: f[2])

    @classmethod
    def from_state(cls, state_dir: str | Path, jobs: set[str] | None = None) -> Schedule:
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
        return cls(fires)

    def session_of(self, at: datetime) -> str:
        """The session of the latest fire at or before `at` (within a day), else the UTC date."""
        best = None
        for _job, session, when in self.fires:
            if when > at:
                break
            if at - when <= DAY:
                best = session
        return best or at.astimezone(UTC).date().isoformat()

    def expected(self, job: str, at: datetime, within: int) -> bool:
        """A fire (or run) of `job` happened in [at - within, at]."""
        low = at - timedelta(seconds=within)
        return any(j == job and low <= when <= at for j, _s, when in self.fires)
