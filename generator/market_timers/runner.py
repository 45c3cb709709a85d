"""The job runner: `ExecStart=market-timers-run -- COMMAND...` in every generated service.

1. refuses a start later than the job's grace (exit 170, "stale start");
2. takes a non-blocking flock on <lock dir>/<lock group>.lock; busy -> logs the holder, exit 171;
3. execs the job in this same process, so the job is the unit's main PID (WatchdogSec= with
   NotifyAccess=main works) and the inherited lock fd lives exactly as long as the job; the OS
   releases the lock however the job dies.

A periodic job (MARKET_SLOT_EVERY_SEC and the like in its unit, slotclock.py) is judged by
run_slot(): the start belongs to the latest slot at or before it; grace is measured from that
slot, and the run record is that slot's, created exclusively (a second start for the slot is
refused, 173).

`market-timers-run --record` (ExecStopPost=) completes the run record.

Hot path: standard library only, never pandas or exchange_calendars. Its whole context comes from
the unit's Environment= lines, written by render.py.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from datetime import UTC, datetime, timedelta

from . import runstart, slotclock
from .exitcodes import OVERLAP_SKIPPED, RUNNER_ERROR, STALE_START

ERR, WARNING, INFO = 3, 4, 6


def log(priority: int, message: str) -> None:
    # sd-daemon(3) priority prefixes, read by journald on a service's stdout/stderr.
    prefix = f"<{priority}>" if os.environ.get("JOURNAL_STREAM") else ""
    print(f"{prefix}market-timers-run: {message}", file=sys.stderr, flush=True)


def scheduled_instant(env: dict, now: datetime) -> datetime:
    """The instant this run was planned for: explicit, or today's (or yesterday's) daily time."""
    if env.get("MARKET_SCHEDULED_UTC"):
        # fromisoformat is C code; strptime would import _strptime (re, locale, calendar):
        # about 5 ms of the runner's start.
        text = env["MARKET_SCHEDULED_UTC"]
        if len(text) != 20 or not text.endswith("Z"):
            raise ValueError(f"MARKET_SCHEDULED_UTC={text!r} is not YYYY-MM-DDTHH:MM:SSZ")
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    hh, mm, ss = (int(x) for x in env["MARKET_DAILY_UTC"].split(":"))
    today = now.replace(hour=hh, minute=mm, second=ss, microsecond=0)
    return today if today <= now + timedelta(seconds=1) else today - timedelta(days=1)


def take_lock(lock_dir: str, group: str, job: str, session: str) -> int | None:
    """The locked fd (inheritable), or None when another run holds the group's lock."""
    os.makedirs(lock_dir, exist_ok=True)
    path = os.path.join(lock_dir, f"{group}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        log(WARNING, f"lock group '{group}' is busy (held by {holder}); this run of {job} "
                     f"for session {session} is dropped, not queued")
        return None
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} job {job} session {session} since {stamp}\n".encode(), 0)
    os.set_inheritable(fd, True)
    return fd


def run(argv: list[str], env: dict) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        log(ERR, "usage: market-timers-run -- COMMAND [ARG...]  |  market-timers-run --record")
        return RUNNER_ERROR
    try:
        job = env["MARKET_JOB"]
        grace = int(env.get("MARKET_GRACE_SEC", "120"))
        now = datetime.now(UTC)
        schedule = slotclock.Schedule.from_env(env)  # a periodic job: judge the slot
        if schedule is not None:
            return run_slot(argv, env, job, grace, now, schedule)
        scheduled = scheduled_instant(env, now)
    except (KeyError, ValueError) as e:
        log(ERR, f"bad or missing context in the environment ({e}); run me from a unit made "
                 "by `market-timers render`")
        return RUNNER_ERROR
    session = env.get("MARKET_SESSION") or scheduled.date().isoformat()
    late = (now - scheduled).total_seconds()
    state_dir = env.get("MARKET_STATE_DIR", "/var/lib/market-timers")
    if late > grace:
        log(ERR, f"stale start: {job} for session {session} was due at "
                 f"{scheduled:%Y-%m-%dT%H:%M:%SZ} and it is {late:.0f} s later, more than its "
                 f"grace of {grace} s; not running it")
        _record(state_dir, job, session, scheduled, refused="stale-start", late_sec=round(late, 3))
        return STALE_START
    lock = take_lock(env.get("MARKET_LOCK_DIR", "/run/market-timers"),
                     env.get("MARKET_LOCK_GROUP", job), job, session)
    if lock is None:
        _record(state_dir, job, session, scheduled, refused="overlap-skipped")
        return OVERLAP_SKIPPED
    child_env = dict(env)
    child_env.update(MARKET_SESSION=session, PYTHONFAULTHANDLER="1",
                     MARKET_SCHEDULED_UTC=scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"))
    _record(state_dir, job, session, scheduled, late_sec=round(late, 3), pid=os.getpid())
    try:
        os.execve(argv[0], argv, child_env)
    except OSError as e:
        log(ERR, f"cannot run {argv[0]}: {e.strerror}")
        return RUNNER_ERROR
    return RUNNER_ERROR  # not reached


def run_slot(argv: list[str], env: dict, job: str, grace: int, now: datetime,
             schedule: slotclock.Schedule) -> int:
    """A periodic job's start: the slot it belongs to (the latest one at or before now), refused
    when later than grace after it (170), when the lock group is busy (171) or when that slot
    already has a record (173: a duplicate fire); each outcome is that slot's run record."""
    session = env.get("MARKET_SESSION", "")
    if not session:
        raise KeyError("MARKET_SESSION")
    slot = schedule.current(now)
    slot_text = slotclock.z(slot)
    key = slotclock.record_key(session, slot)
    late = (now - slot).total_seconds()
    state_dir = env.get("MARKET_STATE_DIR", "/var/lib/market-timers")
    invocation = env.get("INVOCATION_ID")
    what = f"{job} for session {session}, slot {slot_text}"

    def record(**fields) -> bool:
        try:
            made = slotclock.write_new(state_dir, job, key, dict(
                session=session, slot=slot_text, scheduled_utc=slot_text,
                started_utc=datetime.now(UTC).isoformat(timespec="milliseconds"),
                started_mono=time.monotonic(), invocation=invocation, result=None, **fields))
            if made:
                slotclock.write_pointer(state_dir, job, session, invocation, key)
            return made
        except OSError as e:  # a record must never stop the job from running
            log(WARNING, f"cannot write the run record in {state_dir}: {e}")
            return True

    if late > grace:
        log(ERR, f"stale start: {what} is {late:.0f} s late, more than its grace of {grace} s; "
                 "not running it (missed slots are not replayed)")
        record(refused="stale-start", late_sec=round(late, 3))
        return STALE_START
    lock = take_lock(env.get("MARKET_LOCK_DIR", "/run/market-timers"),
                     env.get("MARKET_LOCK_GROUP", job), job, f"{session} slot {slot_text}")
    if lock is None:
        record(refused="overlap-skipped", late_sec=round(late, 3))
        return OVERLAP_SKIPPED
    if not record(late_sec=round(late, 3), pid=os.getpid()):
        os.close(lock)
        log(WARNING, f"{what} already has a run record: this start is a duplicate, not run")
        return slotclock.SLOT_ALREADY_RAN
    child_env = dict(env)
    child_env.update(MARKET_SESSION=session, PYTHONFAULTHANDLER="1", MARKET_SLOT_UTC=slot_text,
                     MARKET_SCHEDULED_UTC=slot_text)
    try:
        os.execve(argv[0], argv, child_env)
    except OSError as e:
        log(ERR, f"cannot run {argv[0]}: {e.strerror}")
        return RUNNER_ERROR
    return RUNNER_ERROR  # not reached


def _record(state_dir: str, job: str, session: str, scheduled: datetime, **fields) -> None:
    try:
        runstart.write_start(state_dir, job, session, dict(
            scheduled_utc=scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
            started_utc=datetime.now(UTC).isoformat(timespec="milliseconds"),
            started_mono=time.monotonic(), invocation=os.environ.get("INVOCATION_ID"),
            result=None, **fields))
    except OSError as e:  # a record must never stop the job from running
        log(WARNING, f"cannot write the run record in {state_dir}: {e}")


def record(env: dict) -> int:
    """ExecStopPost=: complete the run record with how the service ended."""
    from . import runrecord

    job = env.get("MARKET_JOB")
    if not job:
        return 0
    state_dir = env.get("MARKET_STATE_DIR", "/var/lib/market-timers")
    now = datetime.now(UTC)
    if env.get("MARKET_SLOT_EVERY_SEC"):
        from .slotrecords import complete_from_env

        return complete_from_env(env, state_dir, job, now)
    try:
        session = env.get("MARKET_SESSION") or scheduled_instant(env, now).date().isoformat()
        previous = runrecord.read(state_dir, job, session) or {}
        fields = dict(result=env.get("SERVICE_RESULT"), exit_code=env.get("EXIT_CODE"),
                      exit_status=env.get("EXIT_STATUS"),
                      finished_utc=now.isoformat(timespec="milliseconds"),
                      invocation=env.get("INVOCATION_ID") or previous.get("invocation"))
        if "started_mono" in previous:
            fields["duration_sec"] = round(time.monotonic() - previous["started_mono"], 3)
        runrecord.update(state_dir, job, session, **fields)
    except (OSError, ValueError, KeyError) as e:
        log(WARNING, f"cannot complete the run record: {e}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--record"]:
        return record(dict(os.environ))
    return run(argv, dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
