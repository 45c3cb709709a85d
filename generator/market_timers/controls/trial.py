"""`market-timers try JOB`: run one job once, a few seconds from now, to see the whole path work.

The job's units are rendered as for a session, but with the session id `try-<UTC time>` (never a
session date), written into systemd's runtime unit directory /run/systemd/system (gone at the
next boot; `sync` never looks there) and the timer is started: systemd starts a brand-new unit
file without a daemon-reload. So a try:
* is not a session's run: the deadman, `status` and the digest only know planned sessions, and its
  run is recorded in the run ledger under that id (ledger/<job>/try-<time>/);
* leaves no Persistent= stamp and has no OnSuccess= handler (a successful try must not close the
  alerts of a real run that failed); a failing try alerts like any run, naming its try session;
* is refused when a planned run of the same lock group falls within its timeout: it would hold
  the lock then, and that session's run would be skipped.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.config.loader import Config, default_runner
from market_timers.contracts import unitname
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile
from market_timers.schedule import plan as planning
from market_timers.schedule.render import job_units, write_atomic

RUNTIME_UNIT_DIR = Path("/run/systemd/system")


class TryError(Exception):
    pass


class UnknownJob(TryError):
    pass


class TooSoon(TryError):
    """A timer written for an instant already gone is elapsed to systemd: it never starts."""


# Seconds between the timer's write and its fire: systemd must still see it ahead.
MARGIN = 3
DEFAULT_DELAY = 5
# try --wait: seconds past the job's timeout (systemd stops it then) for its end to be recorded
END_MARGIN = 30


def minimum_delay(job) -> int:
    return job.fire_lead + MARGIN


@dataclass
class Trial:
    timer: str
    service: str
    fire_utc: datetime
    session_id: str
    job: str = ""

    def lines(self) -> list[str]:
        return [
            f"started {self.timer}: {self.service} runs at {self.fire_utc:%Y-%m-%d %H:%M:%S} "
            f"UTC as session {self.session_id} (a try: no session's run is replaced)",
            f"follow it:  journalctl -f -u {self.service}",
            f"its result: systemctl status {self.service}",
        ]


def start_try(config: Config, job_name: str, now: datetime, delay: int | None, systemctl,
              unit_dir: Path | None = None) -> Trial:
    """delay None: the default, or the job's minimum when its lead asks for more."""
    try:
        job = config.job(job_name)
    except KeyError:
        raise UnknownJob(config.unknown_job(job_name)) from None
    least = minimum_delay(job)
    if delay is not None and delay < least:
        raise TooSoon(f"--in {delay}: {job.name}'s timer fires {job.fire_lead} s before its "
                      f"instant (lead/warm), so the try needs at least {least} s "
                      f"(its lead + {MARGIN} s); sooner, systemd finds the timer elapsed and "
                      "never starts it")
    delay = max(DEFAULT_DELAY, least) if delay is None else delay
    at = now.replace(microsecond=0) + timedelta(seconds=delay)
    _refuse_overlap(config, job, now, at)
    try_id = f"try-{at:%Y%m%dT%H%M%SZ}"
    if job.is_session_job:
        from market_timers.schedule.calendars import resolve

        fire = planning.Fire(at, job.name, resolve(job.calendar), at.date(), job.event,
                             job.offset)
    else:
        fire = planning.Fire(at, job.name, "UTC", at.date(), planning.DAILY, 0)
    units = job_units(config, job, fire, config.runner or default_runner(), try_id=try_id)
    unit_dir = unit_dir or RUNTIME_UNIT_DIR
    try:
        for unit in units:
            write_atomic(unit_dir / unit.name, unit.text, sync=atomicfile.DURABLE)
    except OSError as e:
        raise TryError(f"cannot write the try's units into {unit_dir}: {e.strerror or e} "
                       "(run it as root)") from None
    timer = next(u.name for u in units if u.name.endswith(".timer"))
    systemctl.start([timer])
    return Trial(timer, unitname.service_of(timer), at, try_id, job.name)


def await_try(config: Config, result: Trial, systemctl, now: datetime, wait_sec: float,
              to_the_end: bool = False) -> int:
    """Wait for the runner's judgement of the try (its fire, then `wait_sec` at most) and say
    it: 0 when the job ran or the judgement is still to come, 1 when the start was refused
    (which outcome refused it) or the unit ended without a judgement (controls/verdict.py).
    `to_the_end` (--wait): then wait for the run's end (its timeout + END_MARGIN at most) and
    exit by its outcome: 0 for ok, 1 otherwise."""
    from market_timers import ledger
    from market_timers.controls.verdict import await_end, await_verdict, tell_end, tell_unjudged

    ahead = max((result.fire_utc - now).total_seconds(), 0.0)
    key = ledger.Key(result.job, result.session_id)
    book = ledger.for_config(config)
    verdict = await_verdict(book, key, result.service, systemctl, ahead + wait_sec)
    if verdict.state == "refused":
        print(f"market-timers try: {verdict.refusal(key.job, result.session_id)}; not run "
              f"({result.service})", file=sys.stderr)
        return 1
    if verdict.state != "ran":
        return tell_unjudged("try", result.service, verdict, ahead + wait_sec)
    print(f"{result.service}: the runner started the job", flush=True)
    if not to_the_end:
        return 0
    bound = config.job(result.job).timeout + END_MARGIN
    kind = await_end(book, key, result.service, verdict.invocation, systemctl, bound)
    return tell_end(book, key, result.service, kind, bound)


def _refuse_overlap(config: Config, job, now: datetime, at: datetime) -> None:
    """A planned run of the lock group within this try's timeout would find the lock held."""
    jobs = {j.name: j for j in config.jobs}
    until = at + timedelta(seconds=job.timeout)
    for f in planning.plan_ahead(config, now):
        other = jobs.get(f.job)
        if other is None or other.lock != job.lock:
            continue
        lo = at - timedelta(seconds=other.timeout)
        # a periodic job's fire is many slots: any of them may fall in the try's run
        hit = next((t for t in (f.slots or (f.fire_utc,)) if lo <= t <= until), None)
        if hit is not None:
            raise TryError(
                f"{f.job}'s planned run for {f.calendar} {f.session} at {iso(hit)} shares the "
                f"lock group {job.lock!r} and falls within this try's run (up to its timeout "
                f"of {job.timeout} s): one of the two would be skipped. Try after that run.")
