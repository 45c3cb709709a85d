"""One run of a backfill (controls/backfill.py): started as `run --session` starts one, waited
for until the ledger holds it, and told as a line.

The wait ends once the unit has left systemd's active states and the ledger holds its attempt
(or its refused start), or systemd ended it before the runner could record anything; it is
bounded by the job's timeout and retries plus a margin.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from market_timers import ledger
from market_timers.controls.manual_run import StartFailed, start_ticketed
from market_timers.ledger.sessionstate import SUCCEEDED, state

POLL_SEC = 1.0
START_MARGIN_SEC = 120  # systemd's queue, the unit's start, the runner's claim, the record step
ENDED = ("inactive", "failed")
SHOWN = ("ActiveState", "SubState", "Result", "InvocationID")
NOT_ENDED = "not ended"

# A run's line: what happened to (job, session).
RAN = "ran ok"
FAILED = "failed"
ALREADY_RAN = "already ran"
SKIPPED = "skipped"
NOT_RUN = "not run"
WOULD_RUN = "would run"


@dataclass
class Line:
    session: date
    job: str
    outcome: str  # one of the names above
    detail: str = ""
    unit: str = ""
    succeeded: bool = False  # ran ok now, or already had
    running: bool = False  # the wait's bound passed: it may still run, nothing may start beside

    def text(self) -> str:
        return f"{self.session}  {self.job}: {self.outcome}" + (f" ({self.detail})"
                                                              if self.detail else "")

    def to_json(self) -> dict:
        return {"session": self.session.isoformat(), "job": self.job,
                "outcome": self.outcome.replace(" ", "-"), "detail": self.detail,
                "unit": self.unit or None}


def wait_bound(job) -> float:
    """How long a run may take from its start to its record: its timeout for each attempt,
    the longest retry delays between them, and a margin."""
    attempts = 1 + job.retries
    return (attempts * job.timeout + job.retries * job.retry_delay_max + job.fire_lead
            + START_MARGIN_SEC)


class Backfill:
    def __init__(self, config, *, now: datetime | None, systemctl, unit_dir: Path, book,
                 sleep=time.sleep, clock=time.monotonic, out=print):
        self.config, self.now, self.systemctl, self.unit_dir = config, now, systemctl, unit_dir
        self.book, self.sleep, self.clock, self.out = book, sleep, clock, out
        self.jobs = {j.name: j for j in config.jobs}
        self.noted_pauses: set[str] = set()

    def _key(self, job: str, session: date) -> ledger.Key:
        return ledger.Key(job, session.isoformat())

    def _pause_note(self, job, session: date) -> None:
        from market_timers.ledger.pauses import paused

        if job.name in self.noted_pauses:
            return
        held = paused(self.config.state_dir, job.name, job.lock, session.isoformat())
        if held is not None:
            self.noted_pauses.add(job.name)
            self.out(f"note: {job.name} is paused ({held['scope']}, by {held.get('by', '?')}: "
                     f"{held.get('note', '')}); a pause does not hold an operator's run, so the "
                     f"backfill runs it; its timers stay paused until: {held['resume']}")

    def run_one(self, fire) -> Line:
        """Start the run of `fire` and wait for it to end: its line."""
        job = self.jobs[fire.job]
        key = self._key(job.name, fire.session)
        before = len(self.book.attempts(key)) + len(self.book.refusals(key))
        self._pause_note(job, fire.session)
        try:
            unit = start_ticketed(self.config, job, fire, force=False, now=self.now_for_unit(),
                                  systemctl=self.systemctl, unit_dir=self.unit_dir,
                                  book=self.book)
        except StartFailed as e:
            return Line(fire.session, job.name, FAILED, f"not started: {e}")
        ended = self._wait(unit, key, before, self.clock() + wait_bound(job))
        if ended is not None:
            return Line(fire.session, job.name, FAILED, ended, unit,
                        running=ended.startswith(NOT_ENDED))
        found = state(self.book, job.name, fire.session.isoformat())
        if found == SUCCEEDED:
            return Line(fire.session, job.name, RAN, unit, unit, succeeded=True)
        return Line(fire.session, job.name, FAILED,
                    f"{found}; see journalctl -u {unit}", unit)

    def now_for_unit(self) -> datetime:
        """The instant that names the one-off unit: the real one, unless --now pretends."""
        from market_timers.host.clock import utcnow

        return self.now or utcnow()

    def _wait(self, unit: str, key: ledger.Key, before: int, deadline: float) -> str | None:
        """None once the run of `unit` has ended and the ledger holds it; else why it is over
        without a record (systemd ended the unit first, or the wait's bound passed)."""
        while True:
            props = self.systemctl.show([unit], SHOWN).get(unit, {})
            if props.get("ActiveState", "inactive") in ENDED:
                recorded = len(self.book.attempts(key)) + len(self.book.refusals(key))
                if recorded > before:
                    return None
                # inactive without an invocation: still queued (or collected: the ledger says)
                if props.get("ActiveState") == "failed" or props.get("InvocationID"):
                    return (f"the unit ended ({props.get('Result') or '?'}) before the runner "
                            f"recorded a start; see journalctl -u {unit}")
            if self.clock() > deadline:
                return (f"{NOT_ENDED} after {wait_bound(self.jobs[key.job]):.0f} s (its timeout, "
                        f"retries and a margin): no longer waiting; see journalctl -u {unit}")
            self.sleep(POLL_SEC)
