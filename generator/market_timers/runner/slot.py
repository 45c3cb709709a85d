"""A periodic job's start (MARKET_SLOT_EVERY_SEC, slotclock.py): judged per slot, claimed per
(job, session, slot). Imported by the runner only for a periodic job.
"""

import os
import time
from datetime import datetime

from market_timers import ledger
from market_timers.contracts.exitcodes import OVERLAP_SKIPPED, RUNNER_ERROR, STALE_START
from market_timers.runner import slotclock
from market_timers.runner.nice import job_nice, set_nice
from market_timers.runner.start import (
    ERR,
    WARNING,
    LockError,
    _already_ran,
    _cluster_lock,
    _now_text,
    _refuse,
    _utc,
    claim_start,
    exec_job,
    log,
    take_lock,
)


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
    claim = claim_start(book, key, "timer", dict(base, started_utc=_now_text(),
                                                 started_mono=time.monotonic(),
                                                 late_sec=round(late, 3)),
                        lock, what, base)
    if isinstance(claim, int):
        return claim
    note(late_sec=round(late, 3), pid=os.getpid(), attempt=claim.attempt)
    # A periodic unit with a lead has the pre-fire's Nice=-10 but no wait (each slot runs at its
    # instant): the job runs at the nice value it would have without it (nice.py).
    set_nice(job_nice(env))
    return exec_job(argv, env, session, slot_text, claim, fence, MARKET_SLOT_UTC=slot_text)
