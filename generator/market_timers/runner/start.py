"""What every start of the runner shares: its journal line, the context read from the unit's
environment, the lock group cluster-wide on the PostgreSQL ledger (this host's flock:
lockgroup.py), the exec of the job and the notes of a refused start. On the hot path: standard
library only.
"""

import os
import sys
import time
from datetime import UTC, datetime, timedelta

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import ALREADY_RAN, OVERLAP_SKIPPED, RUNNER_ERROR
from market_timers.ledger import DatabaseError

ERR, WARNING, INFO = 3, 4, 6


def log(priority: int, message: str) -> None:
    # sd-daemon(3) priority prefixes, read by journald on a service's stdout/stderr.
    prefix = f"<{priority}>" if os.environ.get("JOURNAL_STREAM") else ""
    print(f"{prefix}market-timers-run: {message}", file=sys.stderr, flush=True)


def scheduled_instant(env: dict, now: datetime) -> datetime:
    """The instant this run was planned for: explicit, or today's (or yesterday's) daily time."""
    if env.get(environment.SCHEDULED_UTC):
        # fromisoformat is C code; strptime would import _strptime (re, locale, calendar):
        # about 5 ms of the runner's start.
        text = env[environment.SCHEDULED_UTC]
        if len(text) != 20 or not text.endswith("Z"):
            raise ValueError(f"MARKET_SCHEDULED_UTC={text!r} is not YYYY-MM-DDTHH:MM:SSZ")
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    hh, mm, ss = (int(x) for x in env[environment.DAILY_UTC].split(":"))
    today = now.replace(hour=hh, minute=mm, second=ss, microsecond=0)
    early = int(env.get(environment.LEAD_SEC) or 0)  # a pre-fired timer starts us this early
    return today if today <= now + timedelta(seconds=1 + early) else today - timedelta(days=1)


def utc_text(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cluster_lock(env: dict, book, key, base: dict, lock: int, what: str):
    """On the cluster ledger the lock group is held cluster-wide too: the fence token (str, or
    None on the local ledger), or OVERLAP_SKIPPED when another node holds the group (the local
    lock fd is then closed). One-shot and periodic starts share it, so a group is never run
    twice at once across nodes whatever kind of job holds it."""
    if not book.locks_groups:
        return None
    group = env.get(environment.LOCK_GROUP, key.job)
    try:
        held = book.lock_group(group, key)
    except BaseException:
        os.close(lock)
        raise
    if held is None:
        os.close(lock)
        holder = book.lock_holder(group)
        if holder:
            where = (f"on node {holder.get('node', '?')} ({holder.get('job', '?')} "
                     f"{holder.get('session', '?')} since {holder.get('since', '?')})")
        else:  # the holder took the lock and has not yet recorded itself: a start racing ours
            where = "on another node (a start taking it at this moment)"
        log(WARNING, f"lock group '{group}' is busy {where}; this run of {what} is dropped, "
                     "not queued")
        note_refusal(book, key, base, "overlap-skipped")
        return OVERLAP_SKIPPED
    # The advisory lock lives on this connection: the supervisor keeps it while the job runs (a
    # job exec'd in this process, with no job user, inherits the socket), so the lock is
    # released exactly when the run ends (ledger/postgresql.py, runner/jobuser.py).
    sock, fence = held
    os.set_inheritable(sock, True)
    return fence


def exec_job(argv: list[str], env: dict, session: str, scheduled_text: str, claim,
             fence: str | None = None, drop_capabilities: bool = False, user=None,
             escort_at: float | None = None, fence_answer=None, **context: str) -> int:
    """Run the job with its context: as `user` (jobuser.JobUser), in a child this process
    supervises (its exit status is returned), or, without one, exec'd in this process (returns
    only when the exec failed). drop_capabilities: empty this process's capability sets first
    (the pre-fire escort's CAP_SYS_NICE is never the job's: instant_escort.py). escort_at: the
    instant whose real-time escort is started for the child once it exists. fence_answer: the
    supervisor's answer to the job's `fence check` (jobuser.supervise's serve)."""
    if user is not None:
        from market_timers.runner.jobuser import supervise

        after_fork = None
        if escort_at is not None:
            from market_timers.runner import realtime

            def after_fork(pid: int) -> None:
                realtime.start(escort_at, env.get(environment.JOB, ""), target=pid)

        return supervise(argv, _child_env(env, session, scheduled_text, claim, fence, context),
                         user, realtime=escort_at is not None, after_fork=after_fork,
                         serve=fence_answer)
    if drop_capabilities:
        from market_timers.runner.realtime import (  # loaded before the wait
            drop_capabilities as drop,
        )

        drop(f"the exec of {argv[0]}")
    note_ending(env, "ran")  # the job is this process from here: its end is systemd's to tell
    try:
        os.execve(argv[0], argv, _child_env(env, session, scheduled_text, claim, fence, context))
    except OSError as e:
        log(ERR, f"cannot run {argv[0]}: {e.strerror}")
        note_ending(env, "refused runner-error", replace=True)
        return RUNNER_ERROR
    return RUNNER_ERROR  # not reached


FENCE_ANSWER_SEC = 5  # how long the supervisor's ledger query for a fence check may take


def fence_answerer(book, group: str, fence: str):
    """The supervisor's answer to its job's `fence check` (`holds ...`, `superseded ...`,
    `error ...`), asked over the supervisor's own ledger connection with a deadline of its own
    (the start's has passed by then)."""
    def answer(_request: bytes) -> bytes:
        from market_timers.ledger import DatabaseError

        book.deadline = time.time() + FENCE_ANSWER_SEC
        try:
            if book.check_fence(group, fence):
                return f"holds {fence} {group}".encode()
            h = book.lock_holder(group) or {}
        except DatabaseError as e:
            return f"error {e}".encode()
        return (f"superseded {group} {h.get('node', '?')} {h.get('fence', '?')} "
                f"{h.get('job', '?')} {h.get('session', '?')}").encode()

    return answer


def _child_env(env: dict, session: str, scheduled_text: str, claim, fence, context) -> dict:
    child_env = dict(env)
    child_env.update(MARKET_SESSION=session, PYTHONFAULTHANDLER="1",
                     MARKET_SCHEDULED_UTC=scheduled_text, MARKET_ATTEMPT=str(claim.attempt),
                     **context)
    child_env.pop(environment.TICKET, None)
    child_env.pop(environment.JOB_USER, None)
    child_env.pop(environment.OPERATOR_GROUP, None)
    if fence or claim.fence:
        child_env[environment.FENCE] = str(fence or claim.fence)
    return child_env


def refuse_already_ran(book, key, holder: dict, base: dict) -> int:
    log(WARNING, f"already ran: {key.job} for session {key.session} was started "
                 f"{ledger.describe(holder)}; not running it again. To run it again on purpose: "
                 f"market-timers run {key.job} --session {key.session} --force")
    note_refusal(book, key, base, "already-ran", ran_host=holder.get("host"),
            ran_pid=holder.get("pid"), ran_utc=holder.get("started_utc"))
    return ALREADY_RAN


ENDINGS = "endings"  # <lock dir>/endings/<invocation>: 0700, like locks/


def note_ending(env: dict, text: str, replace: bool = False) -> None:
    """The runner's own account of how this invocation ended, for the record step (record.py):
    `refused KIND`, `ran` (the job was exec'd in place), `exited N` or `killed SIG [stop]` (the
    supervisor's). Only the package's user writes there, so a job (another user) cannot make its
    own exit status 178 pass for a halt. The first account stands unless `replace`. Best effort:
    without one the record step reads systemd's $EXIT_STATUS as before."""
    invocation = env.get("INVOCATION_ID") or ""
    if not invocation.isalnum():
        return
    directory = os.path.join(env.get(environment.LOCK_DIR, environment.DEFAULT_RUNTIME_DIR),
                             ENDINGS)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(directory, invocation), flags, 0o600)
    except OSError:  # FileExistsError: an account already stands
        return
    try:
        os.write(fd, text.encode() + b"\n")
    finally:
        os.close(fd)


def note_refusal(book, key, base: dict, why: str, **fields) -> None:
    try:
        book.refuse(key, dict(base, refused=why, started_utc=now_text(), **fields))
    except (OSError, DatabaseError) as e:  # a note never changes the outcome; the journal has it
        log(WARNING, f"cannot note the {why} in the run ledger: {e}")


def local_ledger(env: dict):
    from market_timers.ledger.local import LocalLedger

    return LocalLedger(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR)


def claim_start(book, key, how: str, fields: dict, lock: int, what: str, base: dict):
    """The claim, the last step before the exec: the ledger's Claim, or an exit status with the
    lock fd closed (172: the claim could not be written, and without it the job could run
    twice; 173: another start won the race)."""
    try:
        claim = book.claim(key, how, fields)
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
        return refuse_already_ran(book, key, claim.holder or {}, base)
    return claim
