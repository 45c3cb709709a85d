"""The job runner: `ExecStart=market-timers-run -- COMMAND...` in every generated service.

In this order:
1. a start by `market-timers run` consumes its one-off ticket (MARKET_TICKET; see manual_run.py):
   it is the operator's, so it skips the grace check, and with --force it is a deliberate re-run;
2. refuses a (job, session) that already started (the run ledger holds attempt 1): exit 173,
   "already ran", logging when, where (host) and by which pid it ran; a forced start skips this;
   then a timer's (or a retry's) start of a paused job or lock group (exit 177, "paused",
   ledger/pauses.py: noted, no claim, so the deadman does not call the session missed); then any
   start of a halted job (178, below: before the refusals that alert);
3. refuses a start later than the job's grace (exit 170, "stale start"); then a start of a job
   with `requires` (MARKET_REQUIRES) whose upstream did not succeed in the session (exit 176,
   upstream.py: a read of the ledger it opened; noted, no claim taken, so that `market-timers
   run` can start it once the upstream has succeeded);
4. takes a non-blocking flock on <lock dir>/<lock group>.lock; busy -> logs the holder, exit 171;
   then, whoever started it, a job a halt covers (exit 178, "halted", ledger/halts.py: the kill
   switch; checked again this late, just before the claim, so that the window between a halt and
   a start that missed it is small; noted, no claim);
5. claims the (job, session) in the ledger: atomic and durable, *after* the lock and *before*
   the exec (and after checking that the program is executable); a start that lost the race
   exits 173 too; on the cluster ledger the claim carries this node's clock, and a clock more
   than max_clock_skew_ms off the ledger's is refused there (exit 179, "clock skew", no claim);
6. starts the job as its own user (MARKET_JOB_USER, jobuser.py): a child execs it through
   setpriv with no capability and none of the runner's descriptors, and the runner supervises it,
   holding the lock for exactly as long as the job runs and ending with its status (a unit of an
   older version execs the job in this same process instead, as the job was then the unit's
   main PID). The OS releases the lock however the runner dies.

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
is "already ran" (173). Its slot record (slotaccount.py counts skipped slots from them) is written
beside the ledger.

On the cluster ledger (PostgreSQL, ledger/postgresql.py) a start has a deadline, instant + grace
(60 s from now for the operator's or a retry's start), that bounds every database step on the
client's side. Only a connection that cannot be made is "unreachable" ([cluster]
on_db_unreachable: skip, 175, or run on the local ledger). A reached database that stays busy
or silent until the deadline refuses the start as stale (170, DeadlinePassed, the reason in the
journal and so in the alert): never run locally, since another node may hold it; a claim that
was sent without an answer, or completed past the grace, is withdrawn. Any other error of a
reached ledger is 175 without the local fallback.

`market-timers-run --record` (ExecStopPost=) records how the attempt ended in the ledger.

Retries (a job with `retries`, retries.py): `--record` after a failed attempt leaves a marker,
`retry N` or `over`; the next start, systemd's Restart=, consumes it and claims the ledger's next
attempt with how="retry" (so it is never "already ran", and skips the grace check: no retry
starts past instant + grace + timeout), or exits 174 when the retries are over.

Hot path: standard library only, never pandas, exchange_calendars or json. Its whole context comes
from the unit's Environment= lines, written by render.py.

The runner's modules: this one, a session job's start (run, _start, main); start.py what every
start shares (the journal line, the lock group, the exec, the refusal notes); prefire.py the wait
for the instant (realtime.py its real-time escort); slotclock.py a periodic job's slots (Slot: what a slot's start adds); retry.py the
retry marker's two ends; record.py the --record step. The entry point, market-timers-run, is
run.py at the package's root. Only this one and start.py load on a plain start; prefire.py joins them
for a pre-fired one.
"""

import os
import sys
import time
from datetime import UTC, datetime

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import (
    CLOCK_SKEW,
    HALTED,
    LEDGER_UNREACHABLE,
    OVERLAP_SKIPPED,
    PAUSED,
    REQUIRES_UNMET,
    RUNNER_ERROR,
    STALE_START,
)
from market_timers.ledger import ClockSkewed, DatabaseError, DeadlinePassed, Unreachable
from market_timers.runner.jobuser import JobUserError
from market_timers.runner.jobuser import resolve as resolve_user
from market_timers.runner.start import (
    ERR,
    INFO,
    WARNING,
    LockError,
    claim_start,
    cluster_lock,
    exec_job,
    fence_answerer,
    local_ledger,
    log,
    note_refusal,
    now_text,
    refuse_already_ran,
    scheduled_instant,
    take_lock,
    utc_text,
)

# A start not judged by the grace (the operator's `market-timers run`, a retry) gives its database
# steps this long on the cluster ledger.
OFF_TIMER_BOUND_SEC = 60

USAGE = """\
usage: market-timers-run -- COMMAND [ARG...]
       market-timers-run --record

The job runner of market-timers: every generated job unit runs it as its ExecStart=, with the
job's context in its environment (MARKET_JOB, MARKET_SESSION, MARKET_SCHEDULED_UTC, ...). It
refuses a session that already ran (exit 173), a start later than the grace (170), a busy lock
group (171), a start whose `requires` did not succeed in the session (176), a paused job or lock
group (177), a job a halt covers (178, `market-timers halt`; every start, the operator's too),
a start on a node whose clock is more than [cluster] max_clock_skew_ms off the cluster ledger's
(179), and exits 172 when it cannot run the job; otherwise it execs COMMAND, whose exit
status passes through. --record (ExecStopPost=) records how the run ended.
See market-timers-run(1).
"""

def run(argv: list[str], env: dict) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        log(ERR, "usage: market-timers-run -- COMMAND [ARG...]  |  market-timers-run --record")
        return RUNNER_ERROR
    slot = None
    try:
        job = env[environment.JOB]
        grace = int(env.get(environment.GRACE_SEC, "120"))
        now = datetime.now(UTC)
        if env.get(environment.SLOT_EVERY_SEC):  # a periodic job: judge the slot (slotclock.py)
            from market_timers.runner.slotclock import Slot

            slot = Slot(env, job, now)
            key, scheduled = slot.key, slot.instant
        else:
            scheduled = scheduled_instant(env, now)
            session = env.get(environment.SESSION) or scheduled.date().isoformat()
            key = ledger.Key(job, session, env.get(environment.SLOT, ""))
    except (KeyError, ValueError) as e:
        log(ERR, f"bad or missing context in the environment ({e}); run me from a unit made "
                 "by `market-timers render`")
        return RUNNER_ERROR
    try:
        book = ledger.open_ledger(env, hand_off=True)  # the DSN, for this start's record step
    except ValueError as e:  # an unknown MARKET_LEDGER
        log(ERR, f"{e}; run me from a unit made by `market-timers render`")
        return RUNNER_ERROR
    except DatabaseError as e:  # the cluster ledger's DSN credential is missing or empty
        return _unreachable(argv, env, e, key, now, scheduled, grace, slot)
    try:
        return _start(argv, env, book, key, now, scheduled, grace, slot)
    except Unreachable as e:  # no connection could be made
        return _unreachable(argv, env, e, key, now, scheduled, grace, slot)
    except ClockSkewed as e:  # the ledger refused the claim: this node's clock is off
        return _refuse_clock_skew(env, book, e, key, scheduled, slot)
    except DeadlinePassed as e:  # connected, but busy or silent until instant + grace
        return _refuse_past_deadline(env, book, e, key, scheduled, grace, slot)
    except DatabaseError as e:  # connected, and the ledger failed: never run locally
        what = slot.unreachable_what if slot else f"{key.job} for session {key.session}"
        log(ERR, f"the cluster ledger failed ({e}); not running {what}: the database was "
                 "reached, so another node may run it (on_db_unreachable is only for a "
                 "database that cannot be reached)")
        return LEDGER_UNREACHABLE


def _refuse_past_deadline(env, book, error, key, scheduled, grace, slot) -> int:
    """The ledger was reached but its steps did not complete before the start's deadline:
    refused as a stale start (a critical "did not run"), with the database's reason."""
    what = slot.what if slot else f"{key.job} for session {key.session}"
    deadline = book.deadline
    at = f" at {utc_text(datetime.fromtimestamp(deadline, UTC))}" if deadline else ""
    if deadline == scheduled.timestamp() + grace:
        at += f" (instant {utc_text(scheduled)} + grace {grace} s)"
    claim = ""
    if book.claim_sent:  # the server may have written it
        claim = ("; its claim, which may have been written, was withdrawn"
                 if book.withdraw(key, env.get("INVOCATION_ID")) else
                 "; its claim may have been written and could not be withdrawn: if `market-timers"
                 " run` says it already ran, it did not: use --force")
    log(ERR, f"stale start: the cluster ledger could not start {what} before its deadline{at}:"
             f" {error}; not running it (a busy database is not an unreachable one: another node "
             f"may have it, so it is not run locally){claim}")
    late = round((datetime.now(UTC) - scheduled).total_seconds(), 3)
    note_refusal(book, key, _base(env, scheduled), "stale-start", late_sec=late,
                 reason=error.reason)
    if slot:
        slot.note(refused="stale-start", late_sec=late)
    return STALE_START


def _refuse_clock_skew(env, book, error, key, scheduled, slot) -> int:
    """The cluster ledger refused the claim: this node's clock is more than max_clock_skew_ms
    off the ledger's, so its timers fired at the wrong real time and its grace check cannot be
    trusted. No claim was taken: a node whose clock agrees claims the session (at its standby
    delay). CLOCK_SKEW (179), a critical alert."""
    what = slot.what if slot else f"{key.job} for session {key.session}"
    book.close()  # the lock group's connection: released for the node that will run it
    log(ERR, f"clock skew: {error}; not running {what}: no claim was taken, so a node whose "
             "clock agrees with the ledger's runs it. Fix this node's time sync (chrony or "
             "systemd-timesyncd: `timedatectl timesync-status`, `chronyc tracking`)")
    note_refusal(book, key, _base(env, scheduled), "clock-skew", clock_skew_ms=error.skew_ms,
                 max_clock_skew_ms=error.bound_ms)
    if slot:
        slot.note(refused="clock-skew", clock_skew_ms=error.skew_ms)
    return CLOCK_SKEW


def _base(env: dict, scheduled: datetime) -> dict:
    return dict(scheduled_utc=utc_text(scheduled), host=os.uname().nodename, pid=os.getpid(),
                invocation=env.get("INVOCATION_ID"))


def _unreachable(argv, env, error, key, now, scheduled, grace, slot) -> int:
    """No connection to the cluster ledger could be made: [cluster] on_db_unreachable decides."""
    what = slot.unreachable_what if slot else f"{key.job} for session {key.session}"
    if env.get(environment.ON_DB_UNREACHABLE, "skip") != "run":
        log(ERR, f"cannot reach the cluster ledger ({error}); not running {what}: "
                 "on_db_unreachable = skip (another node may run it)")
        return LEDGER_UNREACHABLE
    log(WARNING, f"cannot reach the cluster ledger ({error}); running {what} anyway "
                 "(on_db_unreachable = run): another node may run it too")
    if slot:  # the slot's job and records are told the ledger is the local one
        env = dict(env, MARKET_LEDGER="local")
    return _start(argv, env, local_ledger(env), key, now, scheduled, grace, slot)


def _start(argv: list[str], env: dict, book, key, now: datetime, scheduled: datetime,
           grace: int, slot=None) -> int:
    """The one start sequence of a session's job and a periodic job's slot (slot: slotclock.Slot,
    what a slot adds: its records, its lock label; it takes no ticket, no retry, no standby
    delay and no pre-fire wait)."""
    job, session = key.job, key.session
    what = slot.what if slot else f"{job} for session {session}"
    base = _base(env, scheduled)
    how, by = "timer", None
    if book.bounded:  # the cluster ledger: every database step ends by then
        book.deadline = time.time() + OFF_TIMER_BOUND_SEC if env.get(environment.TICKET) \
            else scheduled.timestamp() + grace
    delay = int(env.get(environment.STANDBY_DELAY_SEC) or 0)
    if not slot and delay and not env.get(environment.TICKET) and book.locks_groups:
        # A standby gives the preferred node `standby_delay` to claim first (issue 10): it claims
        # at instant + delay when its timer pre-fired (MARKET_LEAD_SEC: the preferred node claims
        # before the instant), else `delay` after its own start (a late start, a catch-up).
        lead = int(env.get(environment.LEAD_SEC) or 0)
        start = scheduled if now < scheduled else now
        wait = start.timestamp() + delay - time.time()
        time.sleep(max(0.0, min(wait, delay + lead + 1)))
        now = datetime.now(UTC)
    late = (now - scheduled).total_seconds()
    try:
        if not slot and env.get(environment.TICKET):
            nonce = ticket_nonce(env)
            ticket = book.take_ticket(nonce, key) if nonce else None
            if ticket is None and nonce and env.get(environment.RETRIES, "0") != "0" and \
                    retry_pending(env, key):
                # systemd's restart of a failed `market-timers run` of a job with retries: its
                # ticket was for the first attempt; the retry marker decides, as for a timer's
                # run, with its deadline counted from now (the operator's start was late on
                # purpose).
                scheduled = datetime.now(UTC)
            elif ticket is None:
                log(ERR, f"start ticket of {env[environment.TICKET]} ({job} for session "
                         f"{session}) is {'unknown or already used' if nonce else 'missing'}: "
                         "only a start by `market-timers run` has one; start a run with it")
                return RUNNER_ERROR
            else:
                how = "forced" if ticket.get("force") == "yes" else "operator"
                by = ticket.get("by", "?")
                log(INFO, f"{job} for session {session} started by {by} with `market-timers run"
                          f"{' --force' if how == 'forced' else ''}`")
        if not slot and how == "timer" and env.get(environment.RETRIES, "0") != "0":
            from market_timers.runner.retry import retry_start  # systemd's restart?

            attempt, refused = retry_start(env, env.get(environment.STATE_DIR) or
                                           ledger.DEFAULT_STATE_DIR, job, session, scheduled, grace)
            if refused:
                note_refusal(book, key, base, "retries-over", attempt=attempt)
                return refused
            if attempt > 1:
                how = "retry"
                late = (datetime.now(UTC) - scheduled).total_seconds()
                if book.bounded:
                    book.deadline = time.time() + OFF_TIMER_BOUND_SEC
        holder = None if how in ("forced", "retry") else book.holder(key)
    except OSError as e:
        state_dir = book.state_dir or env.get(environment.STATE_DIR, "?")
        log(ERR, f"cannot read the run ledger in {state_dir}: {e}; not running {what} (it could "
                 "run twice)")
        return RUNNER_ERROR
    if holder is not None:
        return refuse_already_ran(book, key, holder, base)
    late_field = {"late_sec": round(late, 3)}
    if how in ("timer", "retry"):  # an operator's `market-timers run` is attended: not paused
        refused = _refuse_paused(env, book, key, base, what, slot, late_field)
        if refused is not None:
            return refused
    # A halt first refuses here, before the refusals that alert (a stale start, requires unmet),
    # which a halted job must not raise; then once more after the lock, just before the claim.
    refused = _refuse_halted(env, book, key, base, what, slot, late_field)
    if refused is not None:
        return refused
    if how == "timer" and late > grace:
        log(ERR, slot.stale_message(late, grace) if slot else
                 f"stale start: {what} was due at {utc_text(scheduled)} and it is {late:.0f} s later, "
                 f"more than its grace of {grace} s; not running it")
        note_refusal(book, key, base, "stale-start", **late_field)
        if slot:
            slot.note(refused="stale-start", **late_field)
        return STALE_START
    if not slot and env.get(environment.REQUIRES) and how in ("timer", "operator"):
        refused = _refuse_unmet(env, book, key, base, what)
        if refused is not None:
            return refused
    elif not slot and env.get(environment.REQUIRES) and how == "forced":
        log(WARNING, f"{what} starts with --force: its requires ({env[environment.REQUIRES]}) "
                     "are not checked")
    if not os.access(argv[0], os.X_OK):  # before the claim: a run that cannot start takes none
        log(ERR, f"cannot run {argv[0]}: not an executable file; {what} did not run")
        return RUNNER_ERROR
    try:  # the job's own user, also before the claim (jobuser.py)
        user = resolve_user(env)
    except JobUserError as e:
        log(ERR, f"{e}; {what} did not run")
        return RUNNER_ERROR
    try:
        lock = take_lock(env.get(environment.LOCK_DIR, environment.DEFAULT_RUNTIME_DIR),
                         env.get(environment.LOCK_GROUP, job), job,
                         slot.lock_label if slot else session)
    except LockError as e:
        log(ERR, f"{e}; {what} did not run")
        return RUNNER_ERROR
    if lock is None:
        note_refusal(book, key, base, "overlap-skipped", **(late_field if slot else {}))
        if slot:
            slot.note(refused="overlap-skipped", **late_field)
        return OVERLAP_SKIPPED
    refused = _refuse_halted(env, book, key, base, what, slot, late_field, lock)
    if refused is not None:
        return refused
    fence = cluster_lock(env, book, key, base, lock, what)
    if isinstance(fence, int):
        if slot:
            slot.note(refused="overlap-skipped", **late_field)
        return fence
    fields = dict(base, started_utc=now_text(), started_mono=time.monotonic(), **late_field)
    if not slot:
        fields["by"] = by
    claim = claim_start(book, key, how, fields, lock, what, base)
    if isinstance(claim, int):
        return claim
    if how == "timer" and time.time() > scheduled.timestamp() + grace and \
            book.withdraws:  # the grace again: the claim itself may have been slow
        return _refuse_late_claim(book, key, claim, lock, scheduled, grace, what, base, slot)
    answer = None
    if fence is not None and user is not None:  # the job asks its supervisor (start.py)
        answer = fence_answerer(book, env.get(environment.LOCK_GROUP, job), str(fence))
    if slot:
        slot.ran(late, claim.attempt)
        if env.get(environment.LEAD_SEC):  # the unit's Nice=-10 without a wait: not the job's
            from market_timers.runner.nice import job_nice, set_nice

            set_nice(job_nice(env))
        return exec_job(argv, env, session, slot.text, claim, fence, user=user,
                        fence_answer=answer, MARKET_SLOT_UTC=slot.text)
    capable, wait = False, []
    if env.get(environment.LEAD_SEC):  # a pre-fired start: the wait for the instant
        from market_timers.runner.prefire import await_exec_time

        capable, wait = await_exec_time(env, scheduled, job, escort_later=user is not None)
    escort_at = scheduled.timestamp() if capable and user is not None else None
    return exec_job([*wait, *argv], env, session, utc_text(scheduled), claim, fence,
                    drop_capabilities=capable, user=user, escort_at=escort_at,
                    fence_answer=answer)


def _refuse_paused(env: dict, book, key, base: dict, what: str, slot, late_field: dict):
    """PAUSED (177) when the job or its lock group is paused for this session (ledger/pauses.py:
    a few file reads), noted as "paused" (no claim: the session stays runnable once resumed, by
    `market-timers run`); None when nothing holds it."""
    from market_timers.ledger.pauses import paused

    held = paused(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, key.job,
                  env.get(environment.LOCK_GROUP, key.job), key.session,
                  warn=lambda text: log(WARNING, text), book=book)  # the cluster's too
    if held is None:
        return None
    until = f" until session {held['until']}" if held.get("until") else ""
    log(WARNING, f"paused: {what} is not run: {held['scope']} is paused{until} by "
                 f"{held.get('by', '?')} since {held.get('since', '?')} ({held.get('note', '')}). "
                 f"To resume: {held['resume']}")
    note_refusal(book, key, base, "paused", scope=held["scope"], note=held.get("note"),
                 paused_by=held.get("by"), until=held.get("until"))
    if slot:
        slot.note(refused="paused", **late_field)
    return PAUSED


def _refuse_halted(env: dict, book, key, base: dict, what: str, slot, late_field: dict,
                   lock: int | None = None):
    """HALTED (178) when a halt covers the job (ledger/halts.py: a few file reads; in a cluster
    one call to the ledger, whose halts hold on every node), whoever
    started it (a timer, a retry, the operator's `market-timers run`, --force). Checked before
    the refusals that alert and again after the lock (`lock`: closed on a refusal), as the last
    step before the claim, so that a halt written meanwhile is seen; noted as
    "halted" (no claim: once resumed, `market-timers run` runs the session). No alert follows
    (the halt's own alert said it: alerts/handler.py)."""
    from market_timers.ledger.halts import halted

    try:
        held = halted(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, key.job,
                      env.get(environment.LOCK_GROUP, key.job), bool(env.get(environment.ORDERS)),
                      warn=lambda text: log(WARNING, text), book=book)  # the cluster's too
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    if held is None:
        return None
    if lock is not None:
        os.close(lock)
    log(WARNING, f"halted: {what} is not run: {held['what']} halted by {held.get('by', '?')} "
                 f"on {held.get('host', '?')} since {held.get('since', '?')} "
                 f"({held.get('reason', '')}). To lift it: {held['resume']}")
    note_refusal(book, key, base, "halted", scope=held["what"], reason=held.get("reason"),
                 halted_by=held.get("by"))
    if slot:
        slot.note(refused="halted", **late_field)
    return HALTED


def _refuse_unmet(env: dict, book, key, base: dict, what: str) -> int | None:
    """`requires`: REQUIRES_UNMET (176) when a required job did not succeed in this session, with
    the refusal noted (no claim: `market-timers run --session` runs it once the upstream has
    succeeded); None when every one did."""
    from market_timers.runner.upstream import first_unmet

    try:
        unmet = first_unmet(book, env[environment.REQUIRES], key.session)
    except OSError as e:
        unmet = (env[environment.REQUIRES], f"unreadable ({e})")
    if unmet is None:
        return None
    upstream, state = unmet
    log(ERR, f"requires unmet: {what} requires {upstream}, which did not succeed in session "
             f"{key.session}: {state}; not running it. Once {upstream} has succeeded: market-timers run "
             f"{key.job} --session {key.session}")
    note_refusal(book, key, base, "requires-unmet", upstream=upstream, upstream_state=state)
    return REQUIRES_UNMET


def _refuse_late_claim(book, key, claim, lock: int, scheduled: datetime, grace: int, what: str,
                       base: dict, slot) -> int:
    """A claim that completed past instant + grace: not run, and taken back so that the session
    stays runnable once (`market-timers run`)."""
    os.close(lock)
    late = (datetime.now(UTC) - scheduled).total_seconds()
    withdrawn = book.withdraw(key, base.get("invocation"), claim.fence)
    book.close()  # the lock group's connection: released
    log(ERR, f"stale start: the claim of {what} completed {late:.1f} s after its instant, past "
             f"its grace of {grace} s (the cluster ledger was slow); not running it; "
             + ("the claim was withdrawn" if withdrawn else
                "its claim could not be withdrawn: `market-timers run --force` runs it"))
    note_refusal(book, key, base, "stale-start", late_sec=round(late, 3),
                 reason="claim completed past the grace")
    if slot:
        slot.note(refused="stale-start", late_sec=round(late, 3))
    return STALE_START


def ticket_nonce(env: dict) -> str | None:
    """The nonce of a `market-timers run` start: the credential its one-off unit loads from
    root's file (manual_run.py), never a value of the environment (`systemctl show` shows that to
    anyone, and a unit's Environment= is no proof of who wrote it)."""
    directory = env.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return None
    try:
        fd = os.open(os.path.join(directory, environment.TICKET_CREDENTIAL),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        text = os.read(fd, 256).decode(errors="replace").strip()
    finally:
        os.close(fd)
    return text if text.isalnum() else None


def retry_pending(env: dict, key) -> bool:
    from market_timers.runner.retry import marker_path

    return os.path.exists(marker_path(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR,
                                      key.job, key.session))


def main(argv: list[str] | None = None) -> int:
    """A start (`market-timers-run -- COMMAND`); the entry point, with --record, is run.py."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE, end="")
        return 0
    return run(argv, dict(os.environ))

