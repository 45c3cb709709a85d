"""The gates of a start (runner/__init__.py `_start` passes a Start through GATES in order).

Each gate takes the Start and returns None (passed) or the exit status of a refusal it has logged
and noted (the first two only wait or bound: they never refuse); a gate that passes leaves on
the Start what the later ones need. The order is the
promise's (exactly once per session, on time, or someone is told), told in market-timers-run(1),
"Order of the checks". Hot path: standard library only; what only some starts need is imported by
the gate that needs it (ticket.py, retry.py, upstream.py, clusterfaults.py).
"""

from __future__ import annotations

import os
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
from market_timers.runner.jobuser import JobUserError
from market_timers.runner.jobuser import resolve as resolve_user
from market_timers.runner.lockgroup import LockError, take_lock
from market_timers.runner.start import (
    ERR,
    WARNING,
    claim_start,
    cluster_lock,
    log,
    now_text,
    refuse_already_ran,
    utc_text,
)

TYPE_CHECKING = False  # the annotations' Start, never imported at run time (no typing here)
if TYPE_CHECKING:
    from market_timers.runner import Start

# A start not judged by the grace (the operator's `market-timers run`, a retry) gives its database
# steps this long on the cluster ledger.
OFF_TIMER_BOUND_SEC = 60


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
