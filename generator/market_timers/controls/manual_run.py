"""`market-timers run JOB --session DATE [--force] [--yes]`: start one job's run for one session,
now. A session whose planned instant has not come is refused without --yes (its timer would run
it; started early, the timer's start is then refused as already run).

The start goes through the runner like a timer's, so the run ledger still decides: without
--force a session that already ran is refused here (exit 2) and, should it start meanwhile, by the
runner (173). The run gets its own unit, `market-<job>@<session>-run<HHMMSS>.service` in
/run/systemd/system: the job's service as sync renders it (same user, sandbox, alert handlers)
plus `MARKET_TICKET=<nonce>`. The ticket (a file in the ledger, `ledger/tickets/<nonce>`, naming
the job, the session, --force and who asked) is what lets the runner skip the grace check and,
with --force, take the next attempt. The runner consumes it: one ticket, one start. No timer
names that unit and the planned services carry no ticket, so a timer-fired start can never be
forced, and a ticket value copied into a config's `environment` matches no file.

A new unit file starts without a daemon-reload (systemd loads it on demand); the file stays in
/run (a tmpfs) until the next boot.
"""

from __future__ import annotations

import os
import pwd
import secrets
import sys
from datetime import date, datetime
from pathlib import Path

from market_timers import ledger
from market_timers.contracts import environment, unitname
from market_timers.contracts.exitcodes import FAILURE, USAGE
from market_timers.contracts.instants import iso
from market_timers.controls.operator import operator_name

RUNTIME_UNIT_DIR = Path("/run/systemd/system")
WAIT_SEC = 20.0  # the command line's bound on the wait for the runner's judgement of the start


def _fail(message: str, code: int = USAGE) -> int:
    print(f"market-timers run: {message}", file=sys.stderr)
    return code


def _owner(config) -> tuple[int, int] | None:
    """The service user's ids when we are root (the runner, as that user, deletes the ticket)."""
    if os.geteuid() != 0:
        return None
    try:
        user = pwd.getpwnam(environment.PACKAGE_USER)  # the runner's user, not the job's
    except KeyError:
        return None
    return user.pw_uid, user.pw_gid


def _write_ticket_source(path: Path, nonce: str) -> None:
    """Root's copy of the nonce: 0600 in a 0700 directory of ours, inside the state directory's
    sync/ (root's too: alerts/snapshot.py)."""
    from market_timers.files import atomicfile, safefs

    safefs.own_directory(path.parent.parent, 0o755)
    safefs.own_directory(path.parent, 0o700)
    atomicfile.write(str(path), nonce + "\n", mode=0o600, sync=atomicfile.DURABLE)


class StartFailed(RuntimeError):
    """The run's ticket or unit could not be written, or systemctl refused the start."""


def start_ticketed(config, job, fire, *, force: bool, now: datetime, systemctl=None,
                   unit_dir: Path = RUNTIME_UNIT_DIR, book=None) -> str:
    """Write the ticket and the one-off unit of `fire` (a session's run of `job`) and start it
    without waiting (`systemctl start --no-block`); return the unit's name. The checks (does the
    session exist, did it run, has its instant come) are the caller's."""
    from market_timers.config.loader import default_runner
    from market_timers.files import atomicfile
    from market_timers.host.systemctl import Systemctl, SystemctlError
    from market_timers.schedule import render

    job_name, session = job.name, fire.session
    book = ledger.for_config(config) if book is None else book
    runner = config.runner or default_runner()
    [service] = [u for u in render.job_units(config, job, fire, runner, handlers=True)
                 if u.name.endswith(".service")]
    name = unitname.manual_run(job_name, session, now).service()
    nonce = secrets.token_hex(16)
    by = operator_name()
    source = Path(ledger.ticket_source(config.state_dir, name))
    # The nonce is in no unit (`systemctl show` is anyone's) and in no file a job or the
    # package's user could write: systemd loads root's 0600 copy into the unit's credentials.
    text = (f"# market-timers run {job_name} --session {session}{' --force' if force else ''}"
            f" by {by} at {iso(now)}: "
            "a one-off start.\n" + service.text +
            f"\n[Service]\nEnvironment={environment.TICKET}={name}\n"
            f"LoadCredential={environment.TICKET_CREDENTIAL}:{source}\n")
    try:
        book.write_ticket(nonce, {"job": job_name, "session": session.isoformat(),
                                  "force": "yes" if force else "no", "by": by,
                                  "unit": name}, owner=_owner(config))
        _write_ticket_source(source, nonce)
        render.write_atomic(unit_dir / name, text, sync=atomicfile.DURABLE)
    except OSError as e:
        raise StartFailed(f"cannot write the run's ticket or unit: {e}") from None
    try:
        (systemctl or Systemctl()).start([name])
    except SystemctlError as e:
        (unit_dir / name).unlink(missing_ok=True)
        raise StartFailed(str(e)) from None
    return name


def command(config, job_name: str, session: date, force: bool, *, now: datetime | None = None,
            systemctl=None, unit_dir: Path = RUNTIME_UNIT_DIR, yes: bool = False,
            wait: float = 0) -> int:
    """Start the run; with `wait`, wait that long at most for the runner's judgement of the
    start (controls/verdict.py): a refused start exits 1 and says which outcome refused it."""
    from market_timers.host.clock import utcnow
    from market_timers.schedule import plan
    from market_timers.schedule.calendars import CalendarError

    jobs = {j.name: j for j in config.jobs}
    if job_name not in jobs:
        return _fail(config.unknown_job(job_name))
    try:
        fires = [f for f in plan.plan_between(config, session, session) if f.job == job_name]
    except CalendarError as e:
        return _fail(str(e))
    if not fires:
        why = ("not a session of its calendar, skipped by the config, or not chosen by its "
               "[job.sessions] rule" if jobs[job_name].selects else
               "not a session of its calendar, or skipped by the config")
        return _fail(f"{job_name} has no run on {session}: {why} (see `market-timers plan "
                     f"--from {session} --to {session}`)")
    fire = fires[0]
    key = ledger.Key(job_name, session.isoformat())
    book = ledger.for_config(config)
    holder = book.holder(key)
    if holder is not None and not force:
        return _fail(f"{job_name} already ran for session {session}: started "
                     f"{ledger.describe(holder)}. Add --force to run it again (a second run: "
                     "be sure the job can take it, e.g. no orders sent twice).")
    now = now or utcnow()
    if holder is None and fire.fire_utc > now and not yes:  # its timer's start would be refused
        return _fail(f"{job_name}'s run for session {session} is planned for "
                     f"{fire.fire_utc:%a %Y-%m-%d %H:%M:%S} UTC, still to come: its timer starts "
                     "it then. Started now it runs early, and the timer's start is refused "
                     "(that session already ran). Add --yes to start it now anyway.")
    try:
        name = start_ticketed(config, jobs[job_name], fire, force=force, now=now,
                              systemctl=systemctl, unit_dir=unit_dir, book=book)
    except StartFailed as e:
        return _fail(str(e), FAILURE)
    if wait > 0:
        from market_timers.controls.verdict import await_verdict, tell_unjudged
        from market_timers.host.systemctl import Systemctl

        verdict = await_verdict(book, key, name, systemctl or Systemctl(), wait)
        if verdict.state == "refused":
            return _fail(f"{verdict.refusal(job_name, session.isoformat())}; not run (unit "
                         f"{name})", FAILURE)
        if verdict.state != "ran" and tell_unjudged("run", name, verdict, wait):
            return FAILURE
    what = (f"a forced re-run (it already ran {ledger.describe(holder)})" if holder is not None
            else "its run" + (" (--force: none recorded yet)" if force else ""))
    print(f"started {name}: {job_name} for session {session}, {what}\n"
          f"follow it with: journalctl -u {name} -f; then: market-timers status --session "
          f"{session}")
    return 0
