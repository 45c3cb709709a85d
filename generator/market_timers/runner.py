"""The job runner: `ExecStart=market-timers-run -- COMMAND...` in every generated service.

In this order:
1. a start by `market-timers run` consumes its one-off ticket (MARKET_TICKET; see manual_run.py):
   it is the operator's, so it skips the grace check, and with --force it is a deliberate re-run;
2. refuses a (job, session) that already started (the run ledger holds attempt 1): exit 173,
   "already ran", logging when, where (host) and by which pid it ran; a forced start skips this;
3. refuses a start later than the job's grace (exit 170, "stale start");
4. takes a non-blocking flock on <lock dir>/<lock group>.lock; busy -> logs the holder, exit 171;
5. claims the (job, session) in the ledger: atomic and durable, *after* the lock and *before*
   the exec (and after checking that the program is executable); a start that lost the race
   exits 173 too;
6. execs the job in this same process, so the job is the unit's main PID (WatchdogSec= with
   NotifyAccess=main works) and the inherited lock fd lives exactly as long as the job; the OS
   releases the lock however the job dies.

Why this order. The promise is "exactly once per session, on time, or someone is told":
* The claim is the last step before the exec: only a start that will run may take it. A stale
  start (3) did not run: had it claimed, the session would count as run, and the operator's
  `market-timers run` to catch it up would be refused. An overlap skip (4) did not run either:
  had it claimed first, the session's only run would be the skipped one, and a later start (the
  operator's, once the group is free) would be refused. Both are told (170 critical, 171
  warning) and stay runnable once.
* The ledger is peeked at (2) before the grace check, so that a second start of a session that
  did run (a timer moved later by a config change, a Persistent= catch-up after a reboot) says
  what happened, "already ran" (a warning), rather than a stale start (a critical "did not run").
  The peek takes nothing; the claim in (5) is what decides a race.
* The lock is taken before the claim: two starts of one lock group serialise on it anyway, and a
  claim taken while the group is busy could not be honoured. A claim that cannot be written (a
  full or read-only state directory) refuses the run with 172: without it the job could run twice.

A periodic job (MARKET_SLOT_EVERY_SEC and the like in its unit, slotclock.py) is judged by
run_slot(): the start belongs to the latest slot at or before it, grace is measured from that
slot, and the ledger key is (job, session, slot): one claim per slot, a second start for the slot
is "already ran" (173). Its slot record (slotrecords.py counts skipped slots from them) is written
beside the ledger.

`market-timers-run --record` (ExecStopPost=) records how the attempt ended in the ledger.

Retries (a job with `retries`, retries.py): `--record` after a failed attempt leaves a marker,
`retry N` or `over`; the next start, systemd's Restart=, consumes it and claims the ledger's next
attempt with how="retry" (so it is never "already ran", and skips the grace check: no retry
starts past instant + grace + timeout), or exits 174 when the retries are over.

Hot path: standard library only, never pandas, exchange_calendars or json. Its whole context comes
from the unit's Environment= lines, written by render.py.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from datetime import UTC, datetime, timedelta

from . import ledger, slotclock
from .exitcodes import (
    ALREADY_RAN,
    LEDGER_UNREACHABLE,
    OVERLAP_SKIPPED,
    RETRIES_OVER,
    RUNNER_ERROR,
    STALE_START,
)
from .ledger.errors import DatabaseError

USAGE = """\
usage: market-timers-run -- COMMAND [ARG...]
       market-timers-run --record

The job runner of market-timers: every generated job unit runs it as its ExecStart=, with the
job's context in its environment (MARKET_JOB, MARKET_SESSION, MARKET_SCHEDULED_UTC, ...). It
refuses a session that already ran (exit 173), a start later than the grace (170), a busy lock
group (171), and exits 172 when it cannot run the job; otherwise it execs COMMAND, whose exit
status passes through. --record (ExecStopPost=) records how the run ended.
See market-timers-run(1).
"""

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
    early = int(env.get("MARKET_LEAD_SEC") or 0)  # a pre-fired timer starts us this early
    return today if today <= now + timedelta(seconds=1 + early) else today - timedelta(days=1)


class LockError(Exception):
    pass


def take_lock(lock_dir: str, group: str, job: str, session: str) -> int | None:
    """The locked fd (inheritable), or None when another run holds the group's lock.

    LockError when the lock cannot be taken at all (missing or unwritable directory, a symlink
    planted in place of the lock file: it is never followed).

    Every other flock goes through atomicfile.flock; this one is the runner's own import-light
    copy, on purpose: the fd outlives any `with` block (it is inherited by the exec'd job, so
    the lock dies with the job, never before), and the start path imports nothing more."""
    path = os.path.join(lock_dir, f"{group}.lock")
    try:
        os.makedirs(lock_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        why = "it is a symbolic link, not followed" if e.errno == errno.ELOOP else e.strerror
        raise LockError(f"cannot open the lock file {path}: {why}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        log(WARNING, f"lock group '{group}' is busy (held by {holder}); this run of {job} "
                     f"for session {session} is dropped, not queued")
        return None
    except OSError as e:
        os.close(fd)
        raise LockError(f"cannot lock {path}: {e.strerror}") from None
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} job {job} session {session} since {stamp}\n".encode(), 0)
    except OSError as e:  # the lock is held; only its note for the next one is missing
        log(WARNING, f"cannot write the holder's note into {path}: {e.strerror}")
    os.set_inheritable(fd, True)
    return fd


def _utc(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
            try:
                return run_slot(argv, env, job, grace, now, schedule)
            except DatabaseError as e:  # the cluster ledger
                if env.get("MARKET_ON_DB_UNREACHABLE", "skip") != "run":
                    log(ERR, f"cannot reach the cluster ledger ({e}); not running this slot of "
                             f"{job}: on_db_unreachable = skip (another node may run it)")
                    return LEDGER_UNREACHABLE
                log(WARNING, f"cannot reach the cluster ledger ({e}); running this slot of "
                             f"{job} anyway (on_db_unreachable = run): another node may run it "
                             "too")
                return run_slot(argv, dict(env, MARKET_LEDGER="local"), job, grace, now,
                                schedule)
        scheduled = scheduled_instant(env, now)
        session = env.get("MARKET_SESSION") or scheduled.date().isoformat()
        key = ledger.Key(job, session, env.get("MARKET_SLOT", ""))
    except (KeyError, ValueError) as e:
        log(ERR, f"bad or missing context in the environment ({e}); run me from a unit made "
                 "by `market-timers render`")
        return RUNNER_ERROR
    try:
        book = ledger.open_ledger(env)
    except ValueError as e:  # an unknown MARKET_LEDGER
        log(ERR, f"{e}; run me from a unit made by `market-timers render`")
        return RUNNER_ERROR
    except DatabaseError as e:  # the cluster ledger's DSN credential is missing or empty
        return _unreachable(argv, env, e, key, now, scheduled, grace)
    try:
        return _start(argv, env, book, key, now, scheduled, grace)
    except DatabaseError as e:
        return _unreachable(argv, env, e, key, now, scheduled, grace)


def _unreachable(argv, env, error, key, now, scheduled, grace) -> int:
    """The cluster ledger cannot be reached (or failed): [cluster] on_db_unreachable decides."""
    if env.get("MARKET_ON_DB_UNREACHABLE", "skip") != "run":
        log(ERR, f"cannot reach the cluster ledger ({error}); not running {key.job} for session "
                 f"{key.session}: on_db_unreachable = skip (another node may run it)")
        return LEDGER_UNREACHABLE
    log(WARNING, f"cannot reach the cluster ledger ({error}); running {key.job} for session "
                 f"{key.session} anyway (on_db_unreachable = run): another node may run it too")
    return _start(argv, env, _local(env), key, now, scheduled, grace)


def _start(argv: list[str], env: dict, book, key, now: datetime, scheduled: datetime,
           grace: int) -> int:
    job, session = key.job, key.session
    base = dict(scheduled_utc=_utc(scheduled), host=os.uname().nodename, pid=os.getpid(),
                invocation=env.get("INVOCATION_ID"))
    how, by = "timer", None
    delay = int(env.get("MARKET_STANDBY_DELAY_SEC") or 0)
    if delay and not env.get("MARKET_TICKET") and hasattr(book, "lock_group"):
        # A standby gives the preferred node `standby_delay` to claim first (issue 10): it claims
        # at instant + delay when its timer pre-fired (MARKET_LEAD_SEC: the preferred node claims
        # before the instant), else `delay` after its own start (a late start, a catch-up).
        lead = int(env.get("MARKET_LEAD_SEC") or 0)
        start = scheduled if now < scheduled else now
        wait = start.timestamp() + delay - time.time()
        time.sleep(max(0.0, min(wait, delay + lead + 1)))
        now = datetime.now(UTC)
    late = (now - scheduled).total_seconds()
    try:
        if env.get("MARKET_TICKET"):
            ticket = book.take_ticket(env["MARKET_TICKET"], key)
            if ticket is None:
                log(ERR, f"start ticket {env['MARKET_TICKET']} of {job} for session {session} is "
                         "unknown or already used; start a run with `market-timers run`")
                return RUNNER_ERROR
            how = "forced" if ticket.get("force") == "yes" else "operator"
            by = ticket.get("by", "?")
            log(INFO, f"{job} for session {session} started by {by} with `market-timers run"
                      f"{' --force' if how == 'forced' else ''}`")
        if how == "timer" and env.get("MARKET_RETRIES", "0") != "0":  # systemd's restart?
            attempt, refused = retry_start(env, env.get("MARKET_STATE_DIR") or
                                           ledger.DEFAULT_STATE_DIR, job, session, scheduled, grace)
            if refused:
                _refuse(book, key, base, "retries-over", attempt=attempt)
                return refused
            if attempt > 1:
                how = "retry"
                late = (datetime.now(UTC) - scheduled).total_seconds()
        holder = None if how in ("forced", "retry") else book.holder(key)
    except OSError as e:
        log(ERR, f"cannot read the run ledger in {getattr(book, 'state_dir', '?')}: {e}; "
                 f"not running {job} for session {session} (it could run twice)")
        return RUNNER_ERROR
    if holder is not None:
        return _already_ran(book, key, holder, base)
    if how == "timer" and late > grace:
        log(ERR, f"stale start: {job} for session {session} was due at {_utc(scheduled)} and it "
                 f"is {late:.0f} s later, more than its grace of {grace} s; not running it")
        _refuse(book, key, base, "stale-start", late_sec=round(late, 3))
        return STALE_START
    if not os.access(argv[0], os.X_OK):  # before the claim: a run that cannot start takes none
        log(ERR, f"cannot run {argv[0]}: not an executable file; {job} for session {session} "
                 "did not run")
        return RUNNER_ERROR
    try:
        lock = take_lock(env.get("MARKET_LOCK_DIR", "/run/market-timers"),
                         env.get("MARKET_LOCK_GROUP", job), job, session)
    except LockError as e:
        log(ERR, f"{e}; {job} for session {session} did not run")
        return RUNNER_ERROR
    if lock is None:
        _refuse(book, key, base, "overlap-skipped")
        return OVERLAP_SKIPPED
    fence = _cluster_lock(env, book, key, base, lock, f"{job} for session {session}")
    if isinstance(fence, int):
        return fence
    try:
        claim = book.claim(key, how, dict(base, started_utc=_now_text(),
                                          started_mono=time.monotonic(), late_sec=round(late, 3),
                                          by=by))
    except OSError as e:
        os.close(lock)
        log(ERR, f"cannot record the start of {job} for session {session} in the run ledger "
                 f"({e}); not running it: without its claim it could run twice")
        return RUNNER_ERROR
    except BaseException:
        os.close(lock)
        raise
    if not claim.ok:
        os.close(lock)
        return _already_ran(book, key, claim.holder or {}, base)
    await_exec_time(env, scheduled)
    return exec_job(argv, env, session, _utc(scheduled), claim, fence)


def _cluster_lock(env: dict, book, key, base: dict, lock: int, what: str):
    """On the cluster ledger the lock group is held cluster-wide too: the fence token (str, or
    None on the local ledger), or OVERLAP_SKIPPED when another node holds the group (the local
    lock fd is then closed). One-shot and periodic starts share it, so a group is never run
    twice at once across nodes whatever kind of job holds it."""
    if not hasattr(book, "lock_group"):
        return None
    group = env.get("MARKET_LOCK_GROUP", key.job)
    try:
        held = book.lock_group(group, key)
    except BaseException:
        os.close(lock)
        raise
    if held is None:
        os.close(lock)
        holder = book.lock_holder(group) or {}
        log(WARNING, f"lock group '{group}' is busy on node {holder.get('node', '?')} "
                     f"({holder.get('job', '?')} {holder.get('session', '?')} since "
                     f"{holder.get('since', '?')}); this run of {what} is dropped, not queued")
        _refuse(book, key, base, "overlap-skipped")
        return OVERLAP_SKIPPED
    # The advisory lock lives on this connection: the job inherits its socket, so the lock is
    # released exactly when the job's process ends (ledger/postgresql.py).
    sock, fence = held
    os.set_inheritable(sock, True)
    return fence


def exec_job(argv: list[str], env: dict, session: str, scheduled_text: str, claim,
             fence: str | None = None, **context: str) -> int:
    """Exec the job in this process with its context (returns only when the exec failed)."""
    child_env = dict(env)
    child_env.update(MARKET_SESSION=session, PYTHONFAULTHANDLER="1",
                     MARKET_SCHEDULED_UTC=scheduled_text, MARKET_ATTEMPT=str(claim.attempt),
                     **context)
    child_env.pop("MARKET_TICKET", None)
    if fence or claim.fence:
        child_env["MARKET_FENCE"] = str(fence or claim.fence)
    try:
        os.execve(argv[0], argv, child_env)
    except OSError as e:
        log(ERR, f"cannot run {argv[0]}: {e.strerror}")
        return RUNNER_ERROR
    return RUNNER_ERROR  # not reached


def run_slot(argv: list[str], env: dict, job: str, grace: int, now: datetime,
             schedule: slotclock.Schedule) -> int:
    """A periodic job's start, claimed per (job, session, slot) in the ledger: refused when that
    slot already ran (173), later than grace after the slot (170), or the lock group is busy
    (171). Each outcome is also the slot's record for the skip accounting (slotrecords.py)."""
    session = env.get("MARKET_SESSION", "")
    if not session:
        raise KeyError("MARKET_SESSION")
    slot = schedule.current(now)
    slot_text = _utc(slot)
    key = ledger.Key(job, session, slotclock.slot_name(slot))
    book = ledger.open_ledger(env)
    state_dir = env.get("MARKET_STATE_DIR", "/var/lib/market-timers")
    invocation = env.get("INVOCATION_ID")
    late = (now - slot).total_seconds()
    what = f"{job} for session {session}, slot {slot_text}"
    base = dict(scheduled_utc=slot_text, host=os.uname().nodename, pid=os.getpid(),
                invocation=invocation)

    def note(**fields) -> None:  # the slot's record, for counting (never stops the job)
        try:
            record_key = slotclock.record_key(session, slot)
            if slotclock.write_new(state_dir, job, record_key, dict(
                    session=session, slot=slot_text, scheduled_utc=slot_text,
                    started_utc=_now_text(), started_mono=time.monotonic(),
                    invocation=invocation, result=None, **fields)):
                slotclock.write_pointer(state_dir, job, session, invocation, record_key)
        except OSError as e:
            log(WARNING, f"cannot write the slot record in {state_dir}: {e}")

    try:
        holder = book.holder(key)
    except OSError as e:
        log(ERR, f"cannot read the run ledger in {state_dir}: {e}; not running {what} (it could "
                 "run twice)")
        return RUNNER_ERROR
    if holder is not None:
        return _already_ran(book, key, holder, base)
    if late > grace:
        log(ERR, f"stale start: {what} is {late:.0f} s late, more than its grace of {grace} s; "
                 "not running it (missed slots are not replayed)")
        _refuse(book, key, base, "stale-start", late_sec=round(late, 3))
        note(refused="stale-start", late_sec=round(late, 3))
        return STALE_START
    if not os.access(argv[0], os.X_OK):
        log(ERR, f"cannot run {argv[0]}: not an executable file; {what} did not run")
        return RUNNER_ERROR
    try:
        lock = take_lock(env.get("MARKET_LOCK_DIR", "/run/market-timers"),
                         env.get("MARKET_LOCK_GROUP", job), job, f"{session} slot {slot_text}")
    except LockError as e:
        log(ERR, f"{e}; {what} did not run")
        return RUNNER_ERROR
    if lock is None:
        _refuse(book, key, base, "overlap-skipped", late_sec=round(late, 3))
        note(refused="overlap-skipped", late_sec=round(late, 3))
        return OVERLAP_SKIPPED
    fence = _cluster_lock(env, book, key, base, lock, what)
    if isinstance(fence, int):
        note(refused="overlap-skipped", late_sec=round(late, 3))
        return fence
    try:
        claim = book.claim(key, "timer", dict(base, started_utc=_now_text(),
                                              started_mono=time.monotonic(),
                                              late_sec=round(late, 3)))
    except OSError as e:
        os.close(lock)
        log(ERR, f"cannot record the start of {what} in the run ledger ({e}); not running it: "
                 "without its claim it could run twice")
        return RUNNER_ERROR
    except BaseException:
        os.close(lock)
        raise
    if not claim.ok:
        os.close(lock)
        return _already_ran(book, key, claim.holder or {}, base)
    note(late_sec=round(late, 3), pid=os.getpid(), attempt=claim.attempt)
    return exec_job(argv, env, session, slot_text, claim, fence, MARKET_SLOT_UTC=slot_text)


def await_exec_time(env: dict, scheduled: datetime) -> None:
    """Pre-fire: the timer fired MARKET_LEAD_SEC early and everything else is done; wait for the
    instant (or MARKET_WARM_SEC before it, for a warm job) on the realtime clock. A start by hand
    well before its timer would have fired runs at once, as it would without a lead."""
    lead = int(env.get("MARKET_LEAD_SEC") or 0)
    if lead <= 0:
        return
    target = scheduled.timestamp() - int(env.get("MARKET_WARM_SEC") or 0)
    if 0 < target - time.time() <= lead + 1:
        from .instant_wait import sleep_until

        # Back to nice 0 as the sleep ends, SPIN before the instant, not at it: lowering the
        # running task's priority makes the kernel reschedule at once (see normal_priority).
        sleep_until(target, before_spin=normal_priority)
    normal_priority()


def normal_priority() -> None:
    """The pre-fired unit runs us at Nice=-10 for a prompt wake-up; the job (and the record step)
    run at nice 0, as without a lead. (Raising one's own nice value needs no privilege.)

    When: as the pre-fire sleep ends, before the last few ms of spinning (instant_wait.SPIN), so
    the reschedule that lowering a running task's priority forces happens off the instant. A
    warm job too is exec'd at nice 0. Tried and measured (bench/alternatives.py): keeping it at
    nice -10 until wait_for_instant() made its action later, not earlier (p50 1.4 ms against
    0.01 ms): the renice at the instant handed the CPU to the other units starting around that
    second."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError as e:
        log(WARNING, f"cannot return to nice 0: {e.strerror}")


def retry_start(env: dict, state_dir: str, job: str, session: str, scheduled: datetime,
                grace: int) -> tuple[int, int | None]:
    """(attempt, None) to run, or (attempt, RETRIES_OVER) to refuse; see retries.py.

    A start that finds the `retry N` marker written by the previous attempt's --record is
    systemd's restart: it claims the ledger's next attempt as "retry" (no "already ran", no grace
    check: its bound is scheduled + grace + timeout) after waiting the exponential part of the
    backoff. An `over` marker ends the retries."""
    from . import retries

    marker = retries.take_marker(state_dir, job, session)
    if marker is None:
        return 1, None
    verb, n, reason = marker
    if verb == "over":
        log(ERR, f"{job} for session {session}: not retried again ({reason})")
        return n, RETRIES_OVER
    delay = int(env.get("MARKET_RETRY_DELAY_SEC", "30"))
    extra = retries.backoff(n, delay, int(env.get("MARKET_RETRY_DELAY_MAX_SEC", "600"))) - delay
    deadline = scheduled + timedelta(seconds=grace + int(env.get("MARKET_TIMEOUT_SEC", "1800")))
    if datetime.now(UTC) + timedelta(seconds=max(extra, 0)) > deadline:
        log(ERR, f"{job} for session {session}: attempt {n} would start after "
                 f"{_utc(deadline)} (instant + grace + timeout); not retried")
        return n - 1, RETRIES_OVER
    if extra > 0:
        log(INFO, f"{job} for session {session}: attempt {n} in {extra} s more (backoff)")
        time.sleep(extra)
    log(INFO, f"{job} for session {session}: attempt {n} of {int(env['MARKET_RETRIES']) + 1}")
    return n, None


def plan_retry(env: dict, state_dir: str, job: str, session: str, attempt: int,
               now: datetime) -> None:
    """After an attempt: leave the marker that tells the next start (systemd's restart) what it
    is: `retry N`, or `over N REASON` (see retries.py)."""
    from . import retries

    status = env.get("EXIT_STATUS", "")
    if env.get("SERVICE_RESULT") == "success" or status in ("170", "171", "172", "173", "174",
                                                                "175"):
        retries.clear_marker(state_dir, job, session)  # not restarted (success, or refused)
        return
    allowed = int(env["MARKET_RETRIES"])
    delay = int(env.get("MARKET_RETRY_DELAY_SEC", "30"))
    wait = retries.backoff(attempt + 1, delay, int(env.get("MARKET_RETRY_DELAY_MAX_SEC", "600")))
    deadline = scheduled_instant(env, now) + timedelta(
        seconds=int(env.get("MARKET_GRACE_SEC", "120")) + int(env.get("MARKET_TIMEOUT_SEC", "0")))
    if attempt > allowed:
        text = f"over {attempt} all {attempt} attempts failed"
    elif now + timedelta(seconds=wait) > deadline:
        text = (f"over {attempt} attempt {attempt + 1} would start past instant + grace + "
                "timeout")
    else:
        text = f"retry {attempt + 1}"
    retries.write_marker(state_dir, job, session, text)
    log(INFO, f"{job} for session {session}: attempt {attempt} failed; {text}")


def _already_ran(book, key, holder: dict, base: dict) -> int:
    log(WARNING, f"already ran: {key.job} for session {key.session} was started "
                 f"{ledger.describe(holder)}; not running it again. To run it again on purpose: "
                 f"market-timers run {key.job} --session {key.session} --force")
    _refuse(book, key, base, "already-ran", ran_host=holder.get("host"),
            ran_pid=holder.get("pid"), ran_utc=holder.get("started_utc"))
    return ALREADY_RAN


def _refuse(book, key, base: dict, why: str, **fields) -> None:
    try:
        book.refuse(key, dict(base, refused=why, started_utc=_now_text(), **fields))
    except (OSError, DatabaseError) as e:  # a note never changes the outcome; the journal has it
        log(WARNING, f"cannot note the {why} in the run ledger: {e}")


def record(env: dict) -> int:
    """ExecStopPost=: record in the ledger how this invocation's attempt (or refusal) ended."""
    job = env.get("MARKET_JOB")
    if not job:
        return 0
    if env.get("MARKET_LEAD_SEC"):
        normal_priority()
    now = datetime.now(UTC)
    if env.get("MARKET_SLOT_EVERY_SEC"):  # the slot this invocation judged: slotrecords.py
        from .slotrecords import complete_from_env

        return complete_from_env(env, env.get("MARKET_STATE_DIR") or ledger.DEFAULT_STATE_DIR,
                                 job, now)
    try:
        session = env.get("MARKET_SESSION") or scheduled_instant(env, now).date().isoformat()
        key = ledger.Key(job, session, env.get("MARKET_SLOT", ""))
        book = ledger.open_ledger(env) if not _ran_locally(env, key) else _local(env)
        book.finish(key, env.get("INVOCATION_ID"), dict(
            result=env.get("SERVICE_RESULT"), exit_code=env.get("EXIT_CODE"),
            exit_status=env.get("EXIT_STATUS"),
            finished_utc=now.isoformat(timespec="milliseconds").replace("+00:00", "Z")))
        if env.get("MARKET_RETRIES", "0") != "0":  # retries.py: the marker for the next start
            attempts = book.attempts(key)
            latest = attempts[-1] if attempts else {}
            if latest.get("invocation") == env.get("INVOCATION_ID"):  # this start ran the job
                plan_retry(env, env.get("MARKET_STATE_DIR") or ledger.DEFAULT_STATE_DIR, job,
                           session, int(latest.get("attempt") or 1), now)
    except (OSError, ValueError, KeyError, DatabaseError) as e:
        log(WARNING, f"cannot record how the run ended in the run ledger: {e}")
    from . import metrics  # off the hot path: the job has ended

    metrics.after_run(env)
    return 0


def _local(env: dict):
    from .ledger.local import LocalLedger

    return LocalLedger(env.get("MARKET_STATE_DIR") or ledger.DEFAULT_STATE_DIR)


def _ran_locally(env: dict, key) -> bool:
    """A cluster node's start that fell back to the local ledger (on_db_unreachable = run)."""
    if (env.get("MARKET_LEDGER") or "local") == "local":
        return False
    invocation = env.get("INVOCATION_ID")
    return any(a.get("invocation") == invocation for a in _local(env).attempts(key))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE, end="")
        return 0
    if argv[:1] == ["--record"]:
        return record(dict(os.environ))
    return run(argv, dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
