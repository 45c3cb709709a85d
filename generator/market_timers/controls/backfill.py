"""`market-timers run JOB --from D1 [--to D2] [--dry-run] [--keep-going] [--downstream] [--json]`:
run a job for a range of past sessions, in order, one at a time.

The sessions are the job's planned ones in the range, as `plan` computes them (calendar,
overrides, skip, [job.sessions]); D2 defaults to the last one whose instant has passed, and a
range reaching a run still to come is refused (its timer runs it). A session that already ran
(the ledger holds attempt 1) is listed, not run again. Each other session's run starts exactly
as `run --session` starts one (manual_run.start_ticketed: a one-off unit with a ticket, through
the runner's claim), and the backfill waits for it to end before the next: the unit has left
systemd's active states and the ledger holds its attempt (or its refused start), or systemd
ended it before the runner could record anything (backfillrun.py). The result is the ledger's
(ledger/sessionstate.py); the first run that did not succeed stops the backfill unless
--keep-going.

--downstream: after a session's run succeeded (now, or it already had), the jobs whose `requires`
include it (and theirs, transitively), in dependency order, for that session, the same way.

A pause does not hold an operator's run (runner: only timer and retry starts are paused); the
backfill says so for each paused job it runs.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import date, datetime, timedelta
from pathlib import Path

from market_timers import ledger
from market_timers.contracts.exitcodes import FAILURE, USAGE
from market_timers.controls.backfillrun import (
    ALREADY_RAN,
    FAILED,
    NOT_RUN,
    RAN,
    SKIPPED,
    WOULD_RUN,
    Backfill,
    Line,
)
from market_timers.controls.manual_run import RUNTIME_UNIT_DIR
from market_timers.ledger.sessionstate import SUCCEEDED, state


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

    job = _backfillable(config, job_name)
    if isinstance(job, int):
        return job
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
    out = (lambda text: None) if as_json else print
    backfill = Backfill(config, now=pretend, systemctl=systemctl or Systemctl(), unit_dir=unit_dir,
                        book=book, sleep=sleep, clock=clock, out=out)
    runs = _Runs(backfill, book, dry_run, keep_going, out)
    below = downstream_order(config.jobs, job_name) if downstream else []
    if not as_json:
        print(f"{'dry run: ' if dry_run else ''}backfill of {job_name}, sessions {start} to "
              f"{end}: {len(fires)} planned" +
              (f"; downstream: {', '.join(below) or 'no job requires it'}" if downstream
               else ""))
    stopped = None
    for fire in fires:
        stopped = _session(runs, fire, below, all_fires, now)
        if stopped is not None:
            break
    if stopped is not None:
        rest = fires[fires.index(all_fires[(job_name, stopped.session)]) + 1:]
        for fire in rest:
            runs.emit(Line(fire.session, job_name, NOT_RUN,
                           "the backfill stopped: a run did not end" if stopped.running else
                           "the backfill stopped at the first failure; --keep-going runs on"))
    counts = {name: sum(1 for x in runs.lines if x.outcome == name)
              for name in (RAN, FAILED, ALREADY_RAN, SKIPPED, NOT_RUN, WOULD_RUN)}
    if as_json:
        print(json.dumps({"job": job_name, "from": start.isoformat(), "to": end.isoformat(),
                          "dry_run": dry_run, "downstream": below if downstream else None,
                          "runs": [x.to_json() for x in runs.lines],
                          "counts": {k.replace(" ", "-"): v for k, v in counts.items()},
                          "ok": counts[FAILED] == 0}, indent=2))
    else:
        _tell(runs.lines, counts, job_name, start, end, stopped)
    return FAILURE if counts[FAILED] > 0 else 0


def _backfillable(config, job_name: str):
    """The job, if a backfill can run it (once per exchange session); else the exit status."""
    jobs = {j.name: j for j in config.jobs}
    if job_name not in jobs:
        return _fail(config.unknown_job(job_name))
    job = jobs[job_name]
    if not job.is_session_job or job.periodic is not None:
        kind = "a periodic job (`every`)" if job.periodic is not None else \
            "a daily job at a fixed UTC time (`at`)"
        return _fail(f"{job_name} is {kind}: a backfill runs a job once per exchange session "
                     "(event + offset); run one of its days with --session DATE")
    return job


class _Runs:
    """The backfill's lines as they come, and how one (job, session) is run or listed."""

    def __init__(self, backfill: Backfill, book, dry_run: bool, keep_going: bool, out):
        self.backfill, self.book, self.dry_run, self.keep_going = backfill, book, dry_run, \
            keep_going
        self.out = out
        self.lines: list[Line] = []

    def emit(self, line: Line) -> Line:
        self.lines.append(line)
        self.out("  " + line.text())
        return line

    def one(self, fire) -> Line:
        """Listed when the ledger holds it already, or on a dry run; else run and waited for."""
        holder = self.book.holder(ledger.Key(fire.job, fire.session.isoformat()))
        if holder is not None:
            found = state(self.book, fire.job, fire.session.isoformat())
            return self.emit(Line(fire.session, fire.job, ALREADY_RAN,
                                  f"started {ledger.describe(holder)}: {found}",
                                  succeeded=found == SUCCEEDED))
        if self.dry_run:
            return self.emit(Line(fire.session, fire.job, WOULD_RUN))
        return self.emit(self.backfill.run_one(fire))

    def stops(self, line: Line) -> bool:
        """A failure stops the backfill, unless --keep-going; a run that did not end, always."""
        return line.outcome == FAILED and (line.running or not self.keep_going)


def _ok(line: Line) -> bool:
    return line.succeeded or line.outcome == WOULD_RUN


def _session(runs: _Runs, fire, below: list[str], all_fires: dict, now: datetime) -> Line | None:
    """The job's run for one session, then its downstream jobs' for that session: the line that
    stops the backfill, or None."""
    line = runs.one(fire)
    if runs.stops(line):
        return line
    if not _ok(line):
        for name in below:
            runs.emit(Line(fire.session, name, SKIPPED, f"{fire.job} did not succeed in this "
                           "session"))
        return None
    done: dict[str, Line] = {fire.job: line}
    for name in below:
        mine = [r for r in runs.backfill.jobs[name].requires if r in done]
        unmet = [r for r in mine if not _ok(done[r])]
        down = all_fires.get((name, fire.session))
        if unmet:
            done[name] = runs.emit(Line(fire.session, name, SKIPPED,
                                        f"{unmet[0]} did not succeed in this session"))
        elif down is None:
            done[name] = runs.emit(Line(fire.session, name, SKIPPED, "no run planned that "
                                        "session"))
        elif down.fire_utc > now:
            done[name] = runs.emit(Line(fire.session, name, SKIPPED, "its run is still to "
                                        "come: its timer starts it"))
        else:
            done[name] = runs.one(down)
            if runs.stops(done[name]):
                return done[name]
    return None


def _tell(lines: list[Line], counts: dict, job_name: str, start: date, end: date,
          stopped: Line | None) -> None:
    """The summary, and where the backfill stopped, for the operator's terminal."""
    print("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v) if lines
          else f"summary: {job_name} has no planned session from {start} to {end}")
    if stopped is not None:
        print(f"market-timers run: {stopped.job} failed for session {stopped.session}: "
              f"{stopped.detail}; the backfill stopped there", file=sys.stderr)
