"""The job runner: `ExecStart=market-timers-run -- COMMAND...` in every generated service.

A start is a `Start` passed through `GATES` in order; the first gate that refuses ends it with an
exit status (contracts/exitcodes.py), and a start that passes them all execs the job. Why the
gates come in this order (the promise: exactly once per session, on time, or someone is told) is
told once, in market-timers-run(1), "Order of the checks".

Hot path: standard library only, never pandas, exchange_calendars, json, typing or dataclasses;
the whole context comes from the unit's Environment= lines (render.py). What only some starts
need is imported by the gate that needs it: ticket.py (`market-timers run`), retry.py, upstream.py
(`requires`), clusterfaults.py (the cluster ledger failing), slotclock.py (a periodic job's slot),
prefire.py (a pre-fired start). start.py holds what every start shares; the entry point,
market-timers-run, is run.py at the package's root.
"""

import os
import sys
import time
from datetime import UTC, datetime

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import (
    HALTED,
    OVERLAP_SKIPPED,
    PAUSED,
    RUNNER_ERROR,
    STALE_START,
)
from market_timers.contracts.outcomes import EXIT
from market_timers.ledger import DatabaseError
from market_timers.runner.jobuser import JobUserError
from market_timers.runner.jobuser import resolve as resolve_user
from market_timers.runner.start import (
    ERR,
    WARNING,
    LockError,
    claim_start,
    cluster_lock,
    exec_job,
    fence_answerer,
    log,
    note_ending,
    note_refusal,
    now_text,
    refuse_already_ran,
    scheduled_instant,
    take_lock,
    utc_text,
)

REFUSAL_OF_STATUS = {status: name for name, status in EXIT.items()}  # 178 -> "halted"...

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
status passes through (128 + the signal for a job killed by SIGTERM, SIGINT, SIGHUP or SIGPIPE,
which systemd would count as a success). --record (ExecStopPost=) records how the run ended,
from the runner's own account of it: a job's own exit 170-179 is its failure, not a refusal.
See market-timers-run(1).
"""


class Start:
    """One start of a session's job or of a periodic job's slot (`slot`: slotclock.Slot, what a
    slot adds: its records, its lock label; it takes no ticket, no retry, no standby delay and
    no pre-fire wait). The gates read it, and a gate that passes leaves on it what the later
    ones need: `how` and `by` (the ticket, a retry), `user`, `lock`, `fence`, `claim`.

    `began` and `planned` are the clock as the runner read it; `now` and `scheduled` the clock as
    the gates judge it (after a standby's wait; a restarted operator's run counts from its own
    start); `late` is now - scheduled, in seconds. `how`: timer, operator, forced or retry
    (ledger/__init__.py)."""

    __slots__ = ("argv", "env", "book", "key", "slot", "began", "planned", "grace", "base",
                 "now", "scheduled", "late", "how", "by", "user", "lock", "fence", "claim")

    def __init__(self, argv: list[str], env: dict, key, now: datetime, scheduled: datetime,
                 grace: int, slot=None, book=None):
        self.argv, self.env, self.book, self.key, self.slot = argv, env, book, key, slot
        self.began, self.planned, self.grace = now, scheduled, grace
        self.base = dict(scheduled_utc=utc_text(scheduled), host=os.uname().nodename,
                         pid=os.getpid(), invocation=env.get("INVOCATION_ID"))
        self.now, self.scheduled = now, scheduled
        self.late = (now - scheduled).total_seconds()
        self.how, self.by = "timer", None
        self.user = self.lock = self.fence = self.claim = None

    def afresh(self, env: dict, book) -> "Start":
        """This start from its first gate again, on another ledger (the local one, when the
        cluster's cannot be reached)."""
        return Start(self.argv, env, self.key, self.began, self.planned, self.grace, self.slot,
                     book)

    @property
    def what(self) -> str:
        return self.slot.what if self.slot else f"{self.key.job} for session {self.key.session}"

    @property
    def late_field(self) -> dict:
        return {"late_sec": round(self.late, 3)}

    def refused(self, why: str, status: int, **fields) -> int:
        """Note the refusal in the ledger (no claim: the deadman does not call the session
        missed), and a slot's in its record with its lateness; the exit status."""
        note_refusal(self.book, self.key, self.base, why, **fields)
        if self.slot:
            self.slot.note(refused=why, **self.late_field)
        return status


def read_start(argv: list[str], env: dict) -> Start:
    """The start the unit's environment describes (KeyError, ValueError: a bad context)."""
    job = env[environment.JOB]
    grace = int(env.get(environment.GRACE_SEC, "120"))
    now = datetime.now(UTC)
    if env.get(environment.SLOT_EVERY_SEC):  # a periodic job: judge the slot (slotclock.py)
        from market_timers.runner.slotclock import Slot

        slot = Slot(env, job, now)
        return Start(argv, env, slot.key, now, slot.instant, grace, slot)
    scheduled = scheduled_instant(env, now)
    session = env.get(environment.SESSION) or scheduled.date().isoformat()
    return Start(argv, env, ledger.Key(job, session, env.get(environment.SLOT, "")), now,
                 scheduled, grace)


def run(argv: list[str], env: dict) -> int:
    """A start, and the runner's account of a refusal (start.py note_ending) unless the job's
    own ending was noted first (a job that ran and exited 178 is not a halt): the record step and
    the alert handler read the refusal from it, never from the exit status alone."""
    status = _run(argv, env)
    kind = REFUSAL_OF_STATUS.get(status)
    if kind is not None:
        note_ending(env, f"refused {kind}")
    return status


def _run(argv: list[str], env: dict) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        log(ERR, "usage: market-timers-run -- COMMAND [ARG...]  |  market-timers-run --record")
        return RUNNER_ERROR
    try:
        start = read_start(argv, env)
    except (KeyError, ValueError) as e:
        log(ERR, f"bad or missing context in the environment ({e}); run me from a unit made "
                 "by `market-timers render`")
        return RUNNER_ERROR
    try:
        start.book = ledger.open_ledger(env, hand_off=True)  # the DSN, for the record step
    except ValueError as e:  # an unknown MARKET_LEDGER
        log(ERR, f"{e}; run me from a unit made by `market-timers render`")
        return RUNNER_ERROR
    except DatabaseError as e:  # the cluster ledger's DSN credential is missing or empty
        from market_timers.runner.clusterfaults import unreachable

        return unreachable(start, e, _start)
    try:
        return _start(start)
    except DatabaseError as e:  # unreachable, a skewed clock, past the deadline, or failed
        from market_timers.runner.clusterfaults import refuse

        return refuse(start, e, _start)


def _start(start: Start) -> int:
    """The one start sequence: every gate in the order of GATES, then the job."""
    for gate in GATES:
        refused = gate(start)
        if refused is not None:
            return refused
    return _exec(start)


# The gates. Each takes the Start and returns None (passed) or the exit status of a refusal it
# has logged and noted. The first two only wait or bound: they never refuse.

def bound_ledger_steps(start: Start) -> None:
    """The cluster ledger's every database step ends by instant + grace (60 s from now for the
    operator's start, which the grace does not judge)."""
    if start.book.bounded:
        start.book.deadline = time.time() + OFF_TIMER_BOUND_SEC \
            if start.env.get(environment.TICKET) else start.scheduled.timestamp() + start.grace


def standby_delay(start: Start) -> None:
    """A standby gives the preferred node `standby_delay` to claim first (issue 10): it claims
    at instant + delay when its timer pre-fired (MARKET_LEAD_SEC: the preferred node claims
    before the instant), else `delay` after its own start (a late start, a catch-up)."""
    env = start.env
    delay = int(env.get(environment.STANDBY_DELAY_SEC) or 0)
    if start.slot or not delay or env.get(environment.TICKET) or not start.book.locks_groups:
        return
    lead = int(env.get(environment.LEAD_SEC) or 0)
    begin = start.scheduled if start.now < start.scheduled else start.now
    wait = begin.timestamp() + delay - time.time()
    time.sleep(max(0.0, min(wait, delay + lead + 1)))
    start.now = datetime.now(UTC)
    start.late = (start.now - start.scheduled).total_seconds()


def operator_ticket(start: Start) -> int | None:
    """A start by `market-timers run` consumes its one-off ticket (ticket.py): the operator's
    (how "operator", no grace check, no pause) or, with --force, a deliberate re-run."""
    if start.slot or not start.env.get(environment.TICKET):
        return None
    try:
        from market_timers.runner.ticket import take_ticket

        return take_ticket(start)
    except OSError as e:
        return _unreadable_ledger(start, e)


def retry_marker(start: Start) -> int | None:
    """systemd's restart of a failed attempt (a job with `retries`, retry.py): the next attempt,
    how "retry" (never "already ran", no grace check), or RETRIES_OVER (174)."""
    env = start.env
    if start.slot or start.how != "timer" or env.get(environment.RETRIES, "0") == "0":
        return None
    try:
        from market_timers.runner.retry import retry_start

        attempt, refused = retry_start(env, env.get(environment.STATE_DIR) or
                                       ledger.DEFAULT_STATE_DIR, start.key.job,
                                       start.key.session, start.scheduled, start.grace)
        if refused:
            return start.refused("retries-over", refused, attempt=attempt)
    except OSError as e:
        return _unreadable_ledger(start, e)
    if attempt > 1:
        start.how = "retry"
        start.late = (datetime.now(UTC) - start.scheduled).total_seconds()
        if start.book.bounded:
            start.book.deadline = time.time() + OFF_TIMER_BOUND_SEC
    return None


def not_already_ran(start: Start) -> int | None:
    """ALREADY_RAN (173) when the ledger holds attempt 1: a peek that takes nothing (the claim
    decides a race), before the grace, so that a late second start says "already ran"."""
    if start.how in ("forced", "retry"):
        return None
    try:
        holder = start.book.holder(start.key)
    except OSError as e:
        return _unreadable_ledger(start, e)
    return None if holder is None else refuse_already_ran(start.book, start.key, holder,
                                                          start.base)


def _unreadable_ledger(start: Start, error: OSError) -> int:
    state_dir = start.book.state_dir or start.env.get(environment.STATE_DIR, "?")
    log(ERR, f"cannot read the run ledger in {state_dir}: {error}; not running {start.what} (it "
             "could run twice)")
    return RUNNER_ERROR


def not_paused(start: Start) -> int | None:
    """PAUSED (177) when the job or its lock group is paused for this session (ledger/pauses.py:
    a few file reads; the cluster's too). A timer's or a retry's start only: the operator's
    `market-timers run` is attended."""
    if start.how not in ("timer", "retry"):
        return None
    from market_timers.ledger.pauses import paused

    env, key = start.env, start.key
    held = paused(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, key.job,
                  env.get(environment.LOCK_GROUP, key.job), key.session,
                  warn=lambda text: log(WARNING, text), book=start.book)
    if held is None:
        return None
    until = f" until session {held['until']}" if held.get("until") else ""
    log(WARNING, f"paused: {start.what} is not run: {held['scope']} is paused{until} by "
                 f"{held.get('by', '?')} since {held.get('since', '?')} ({held.get('note', '')}). "
                 f"To resume: {held['resume']}")
    return start.refused("paused", PAUSED, scope=held["scope"], note=held.get("note"),
                         paused_by=held.get("by"), until=held.get("until"))


def not_halted(start: Start) -> int | None:
    """HALTED (178) when a halt covers the job, whoever started it (ledger/halts.py). Checked
    here, before the refusals that alert (a stale start, requires unmet), which a halted job must
    not raise; and again after the lock (still_not_halted). No alert follows: the halt's own
    said it (alerts/handler.py)."""
    from market_timers.ledger.halts import halted

    env, key = start.env, start.key
    try:
        held = halted(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, key.job,
                      env.get(environment.LOCK_GROUP, key.job), bool(env.get(environment.ORDERS)),
                      warn=lambda text: log(WARNING, text), book=start.book)
    except BaseException:
        if start.lock is not None:
            os.close(start.lock)
        raise
    if held is None:
        return None
    if start.lock is not None:
        os.close(start.lock)
    log(WARNING, f"halted: {start.what} is not run: {held['what']} halted by "
                 f"{held.get('by', '?')} on {held.get('host', '?')} since "
                 f"{held.get('since', '?')} ({held.get('reason', '')}). To lift it: "
                 f"{held['resume']}")
    return start.refused("halted", HALTED, scope=held["what"], reason=held.get("reason"),
                         halted_by=held.get("by"))


def within_grace(start: Start) -> int | None:
    """STALE_START (170) for a timer's start later than its grace: it did not run, takes no
    claim, and stays runnable once by `market-timers run`."""
    if start.how != "timer" or start.late <= start.grace:
        return None
    log(ERR, start.slot.stale_message(start.late, start.grace) if start.slot else
             f"stale start: {start.what} was due at {utc_text(start.scheduled)} and it is "
             f"{start.late:.0f} s later, more than its grace of {start.grace} s; not running it")
    return start.refused("stale-start", STALE_START, **start.late_field)


def requires_met(start: Start) -> int | None:
    """`requires`: REQUIRES_UNMET (176) unless each upstream succeeded in the session
    (upstream.py); a forced start runs regardless and says so, a retry was checked already."""
    requires = start.env.get(environment.REQUIRES)
    if start.slot or not requires or start.how == "retry":
        return None
    if start.how == "forced":
        log(WARNING, f"{start.what} starts with --force: its requires ({requires}) are not "
                     "checked")
        return None
    from market_timers.runner.upstream import refuse_unmet

    return refuse_unmet(start)


def program_runs(start: Start) -> int | None:
    """Before the claim: a run that cannot start takes none."""
    if os.access(start.argv[0], os.X_OK):
        return None
    log(ERR, f"cannot run {start.argv[0]}: not an executable file; {start.what} did not run")
    return RUNNER_ERROR


def job_user(start: Start) -> int | None:
    """The job's own user (jobuser.py), also before the claim."""
    try:
        start.user = resolve_user(start.env)
    except JobUserError as e:
        log(ERR, f"{e}; {start.what} did not run")
        return RUNNER_ERROR
    return None


def lock_group(start: Start) -> int | None:
    """The non-blocking flock of the lock group (start.py take_lock): OVERLAP_SKIPPED (171) when
    another run holds it; taken before the claim, since a claim taken while the group is busy
    could not be honoured. The OS releases it however the runner dies."""
    env, key, slot = start.env, start.key, start.slot
    try:
        start.lock = take_lock(env.get(environment.LOCK_DIR, environment.DEFAULT_RUNTIME_DIR),
                               env.get(environment.LOCK_GROUP, key.job), key.job,
                               slot.lock_label if slot else key.session)
    except LockError as e:
        log(ERR, f"{e}; {start.what} did not run")
        return RUNNER_ERROR
    if start.lock is not None:
        return None
    return start.refused("overlap-skipped", OVERLAP_SKIPPED, **(start.late_field if slot else {}))


def still_not_halted(start: Start) -> int | None:
    """The halt again, the last check before the claim, so that a halt written since the first
    check is seen (the lock is closed on a refusal)."""
    return not_halted(start)


def cluster_lock_group(start: Start) -> int | None:
    """On the cluster ledger the lock group is held cluster-wide too (start.py cluster_lock):
    the fence token, or OVERLAP_SKIPPED (171) when another node holds it."""
    fence = cluster_lock(start.env, start.book, start.key, start.base, start.lock, start.what)
    if isinstance(fence, int):
        if start.slot:
            start.slot.note(refused="overlap-skipped", **start.late_field)
        return fence
    start.fence = fence
    return None


def claim(start: Start) -> int | None:
    """The claim, the last step before the exec, atomic and durable (start.py claim_start): 172
    when it cannot be written, 173 when another start won the race; on the cluster ledger a
    clock too far off the ledger's raises ClockSkewed (clusterfaults.py: 179)."""
    fields = dict(start.base, started_utc=now_text(), started_mono=time.monotonic(),
                  **start.late_field)
    if not start.slot:
        fields["by"] = start.by
    taken = claim_start(start.book, start.key, start.how, fields, start.lock, start.what,
                        start.base)
    if isinstance(taken, int):
        return taken
    start.claim = taken
    return None


def claim_within_grace(start: Start) -> int | None:
    """The grace again, on a ledger that can take a claim back: the claim itself may have been
    slow (clusterfaults.py: withdrawn, STALE_START)."""
    if start.how != "timer" or time.time() <= start.scheduled.timestamp() + start.grace or \
            not start.book.withdraws:
        return None
    from market_timers.runner.clusterfaults import refuse_late_claim

    return refuse_late_claim(start)


GATES = (bound_ledger_steps, standby_delay, operator_ticket, retry_marker, not_already_ran,
         not_paused, not_halted, within_grace, requires_met, program_runs, job_user, lock_group,
         still_not_halted, cluster_lock_group, claim, claim_within_grace)


def _exec(start: Start) -> int:
    """The job, once every gate passed: as its user, supervised, holding the lock for exactly
    as long as it runs (start.py exec_job); a pre-fired start first waits for the instant."""
    env, slot, user, fence, taken = start.env, start.slot, start.user, start.fence, start.claim
    answer = None
    if fence is not None and user is not None:  # the job asks its supervisor (start.py)
        answer = fence_answerer(start.book, env.get(environment.LOCK_GROUP, start.key.job),
                                str(fence))
    if slot:
        slot.ran(start.late, taken.attempt)
        if env.get(environment.LEAD_SEC):  # the unit's Nice=-10 without a wait: not the job's
            from market_timers.runner.nice import job_nice, set_nice

            set_nice(job_nice(env))
        return exec_job(start.argv, env, start.key.session, slot.text, taken, fence, user=user,
                        fence_answer=answer, MARKET_SLOT_UTC=slot.text)
    capable, wait = False, []
    if env.get(environment.LEAD_SEC):  # a pre-fired start: the wait for the instant
        from market_timers.runner.prefire import await_exec_time

        capable, wait = await_exec_time(env, start.scheduled, start.key.job,
                                        escort_later=user is not None)
    escort_at = start.scheduled.timestamp() if capable and user is not None else None
    return exec_job([*wait, *start.argv], env, start.key.session, utc_text(start.scheduled),
                    taken, fence, drop_capabilities=capable, user=user, escort_at=escort_at,
                    fence_answer=answer)


def main(argv: list[str] | None = None) -> int:
    """A start (`market-timers-run -- COMMAND`); the entry point, with --record, is run.py."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE, end="")
        return 0
    return run(argv, dict(os.environ))
