"""`market-timers run JOB --from D1 [--to D2] [--dry-run] [--keep-going] [--downstream] [--json]`:
run a job for a range of past sessions, in order, one at a time.

The sessions are the job's planned ones in the range, as `plan` computes them (calendar,
overrides, skip, [job.sessions]); D2 defaults to the last one whose instant has passed, and a
range reaching a run still to come is refused (its timer runs it). A session that already ran
(the ledger holds attempt 1) is listed, not run again. Each other session's run starts exactly
as `run --session` starts one (manual_run.start_ticketed: a one-off unit with a ticket, through
the runner's claim), and the backfill waits for it to end before the next: the unit has left
systemd's active states and the ledger holds its attempt (or its refused start), or systemd
ended it before the runner could record anything. The wait is bounded by the job's timeout and
retries plus a margin. The result is the ledger's (ledger/sessionstate.py); the first run that did
not succeed stops the backfill unless --keep-going.

--downstream: after a session's run succeeded (now, or it already had), the jobs whose `requires`
include it (and theirs, transitively), in dependency order, for that session, the same way.

A pause does not hold an operator's run (runner: only timer and retry starts are paused); the
backfill says so for each paused job it runs.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from market_timers import ledger
from market_timers.contracts.exitcodes import FAILURE, USAGE
from market_timers.controls.manual_run import RUNTIME_UNIT_DIR, StartFailed, start_ticketed
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


def _fail(message: str, code: int = USAGE) -> int:
    print(f"market-timers run: {message}", file=sys.stderr)
    return code


def downstream_order(jobs: list, name: str) -> list[str]:
    """The jobs whose `requires` include `name`, and theirs, transitively, each after every one
    of them it requires (config order among equals)."""
    order = {j.name: n for n, j in enumerate(jobs)}
    requires = {j.name: [r for r in j.requires if r in order] for j in jobs}
    below = {name}
    grew = True
    while grew:
        grew = False
        for j in jobs:
            if j.name not in below and any(r in below for r in requires[j.name]):
                below.add(j.name)
                grew = True
    below.discard(name)
    out: list[str] = []
    while len(out) < len(below):
        ready = [j for j in below if j not in out and
                 all(r not in below or r in out for r in requires[j])]
        if not ready:  # a cycle: the config's check refuses it; never loop
            break
        out.append(min(ready, key=order.get))
    return out


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


def _sessions(config, job, start: date, end: date | None, now: datetime):
    """(the job's fires in the range, every job's fires by (job, session)), or an error text."""
    from market_timers.schedule import plan
    from market_timers.schedule.calendars import CalendarError

    last = end or now.date() + timedelta(days=1)  # a session date can be ahead of UTC's
    try:
        fires = plan.plan_between(config, start, last)
    except CalendarError as e:
        return str(e)
    mine = [f for f in fires if f.job == job.name]
    if end is None:
        mine = [f for f in mine if f.fire_utc <= now]
    else:
        coming = [f for f in mine if f.fire_utc > now]
        if coming:
            f = coming[0]
            return (f"the range reaches into the future: {job.name}'s run for session "
                    f"{f.session} is planned for {f.fire_utc:%a %Y-%m-%d %H:%M:%S} UTC, still to "
                    "come (its timer runs it). A backfill covers past sessions: end the range "
                    "before it with --to, or leave --to out (the last session before now)")
    return mine, {(f.job, f.session): f for f in fires}


def command(config, job_name: str, start: date, end: date | None, *, dry_run: bool = False,
            keep_going: bool = False, downstream: bool = False, as_json: bool = False,
            now: datetime | None = None, systemctl=None, unit_dir: Path = RUNTIME_UNIT_DIR,
            sleep=time.sleep, clock=time.monotonic) -> int:
    from market_timers.host.clock import utcnow
    from market_timers.host.systemctl import Systemctl

    jobs = {j.name: j for j in config.jobs}
    if job_name not in jobs:
        return _fail(config.unknown_job(job_name))
    job = jobs[job_name]
    if not job.is_session_job or job.periodic is not None:
        kind = "a periodic job (`every`)" if job.periodic is not None else \
            "a daily job at a fixed UTC time (`at`)"
        return _fail(f"{job_name} is {kind}: a backfill runs a job once per exchange session "
                     "(event + offset); run one of its days with --session DATE")
    if end is not None and end < start:
        return _fail(f"--to {end} is before --from {start}")
    pretend, now = now, now or utcnow()
    if start > now.date():
        return _fail(f"--from {start} is in the future: a backfill covers past sessions")
    found = _sessions(config, job, start, end, now)
    if isinstance(found, str):
        return _fail(found)
    fires, all_fires = found
    end = end or (fires[-1].session if fires else start)
    book = ledger.for_config(config)
    lines: list[Line] = []
    out = (lambda text: None) if as_json else print
    backfill = Backfill(config, now=pretend, systemctl=systemctl or Systemctl(), unit_dir=unit_dir,
                        book=book, sleep=sleep, clock=clock, out=out)
    below = downstream_order(config.jobs, job_name) if downstream else []
    if not as_json:
        print(f"{'dry run: ' if dry_run else ''}backfill of {job_name}, sessions {start} to "
              f"{end}: {len(fires)} planned" +
              (f"; downstream: {', '.join(below) or 'no job requires it'}" if downstream
               else ""))

    def emit(line: Line) -> Line:
        lines.append(line)
        out("  " + line.text())
        return line

    def one(fire) -> Line:
        holder = book.holder(backfill._key(fire.job, fire.session))
        if holder is not None:
            found = state(book, fire.job, fire.session.isoformat())
            return emit(Line(fire.session, fire.job, ALREADY_RAN,
                             f"started {ledger.describe(holder)}: {found}",
                             succeeded=found == SUCCEEDED))
        if dry_run:
            return emit(Line(fire.session, fire.job, WOULD_RUN))
        return emit(backfill.run_one(fire))

    def ok(line: Line) -> bool:
        return line.succeeded or line.outcome == WOULD_RUN

    stopped = None
    for fire in fires:
        line = one(fire)
        if line.outcome == FAILED and (line.running or not keep_going):
            stopped = line
            break
        if not ok(line):
            for name in below:
                emit(Line(fire.session, name, SKIPPED, f"{job_name} did not succeed in this "
                          "session"))
            continue
        done: dict[str, Line] = {job_name: line}
        for name in below:
            mine = [r for r in jobs[name].requires if r in done]
            unmet = [r for r in mine if not ok(done[r])]
            down = all_fires.get((name, fire.session))
            if unmet:
                done[name] = emit(Line(fire.session, name, SKIPPED,
                                       f"{unmet[0]} did not succeed in this session"))
            elif down is None:
                done[name] = emit(Line(fire.session, name, SKIPPED, "no run planned that "
                                       "session"))
            elif down.fire_utc > now:
                done[name] = emit(Line(fire.session, name, SKIPPED, "its run is still to come: "
                                       "its timer starts it"))
            else:
                done[name] = one(down)
                if done[name].outcome == FAILED and (done[name].running or not keep_going):
                    stopped = done[name]
                    break
        if stopped is not None:
            break
    if stopped is not None:
        rest = fires[fires.index(all_fires[(job_name, stopped.session)]) + 1:]
        for fire in rest:
            emit(Line(fire.session, job_name, NOT_RUN,
                      "the backfill stopped: a run did not end" if stopped.running else
                      "the backfill stopped at the first failure; --keep-going runs on"))
    counts = {name: sum(1 for x in lines if x.outcome == name)
              for name in (RAN, FAILED, ALREADY_RAN, SKIPPED, NOT_RUN, WOULD_RUN)}
    failed = counts[FAILED] > 0
    if as_json:
        print(json.dumps({"job": job_name, "from": start.isoformat(), "to": end.isoformat(),
                          "dry_run": dry_run, "downstream": below if downstream else None,
                          "runs": [x.to_json() for x in lines],
                          "counts": {k.replace(" ", "-"): v for k, v in counts.items()},
                          "ok": not failed}, indent=2))
    else:
        print("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v) if lines
              else f"summary: {job_name} has no planned session from {start} to {end}")
        if stopped is not None:
            print(f"market-timers run: {stopped.job} failed for session {stopped.session}: "
                  f"{stopped.detail}; the backfill stopped there", file=sys.stderr)
    return FAILURE if failed else 0
