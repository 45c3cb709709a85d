"""Pre-fire (`lead`): the runner's wait for the instant once everything else is done (handed to
market-timers-exec-at, generator/exec_at.c), with its real-time escort, and its return from the
unit's Nice=-10 to the job's nice value (nice.py). On the hot path: os and time only
(instant_escort.py and instant_wait.py are loaded for a pre-fired wait, before it).
"""

import os
import sys
import time
from datetime import datetime

from market_timers.contracts import environment
from market_timers.runner.start import WARNING, log

EXEC_AT = "market-timers-exec-at"  # built from generator/exec_at.c into the venv's bin/


def await_exec_time(env: dict, scheduled: datetime, job: str = "",
                    escort_later: bool = False) -> tuple[bool, list[str]]:
    """Pre-fire: the timer fired MARKET_LEAD_SEC early and everything else is done; the wait for
    the instant (or MARKET_WARM_SEC before it, for a warm job) on the realtime clock, escorted
    (instant_escort.py). A start by hand well before its timer would have fired runs at once,
    as it would without a lead.

    Returns (capable, wait): capable when this process holds the capability the escort needs
    (exec_job then drops it, so the job never has it); wait, the argv prefix that hands the
    wait to market-timers-exec-at (generator/exec_at.c), exec'd at once in place of the job,
    or [] when the wait is over (done here when that program is missing). escort_later: the
    job will run in a child (jobuser.py), whose escort exec_job starts once it exists."""
    lead = int(env.get(environment.LEAD_SEC) or 0)
    if lead <= 0:
        return False, []
    from market_timers.runner import realtime as instant_escort
    from market_timers.runner.nice import job_nice, set_nice

    nice = job_nice(env)  # None: this process's nice value is the job's (a drop-in's Nice=)
    capable = instant_escort.has_cap_sys_nice()
    instant = scheduled.timestamp()
    escorted = False  # with escort_later: whether exec_job is to start the child's escort
    if 0 < instant - time.time() <= lead + 1:  # started by its timer, not by hand long before
        escorted = capable
        if capable and not escort_later:
            instant_escort.start(instant, job)
        elif not capable and os.geteuid() != 0:
            log(WARNING, f"no CAP_SYS_NICE for this pre-fired start of {job} (a unit written "
                         "by an older version: run `market-timers sync`): no real-time "
                         "priority is lent for its instant")
    target = instant - int(env.get(environment.WARM_SEC) or 0)  # a warm job is exec'd early
    if 0 < target - time.time() <= lead + 1:
        helper = exec_at_program()
        if helper is not None:  # it waits, sets the job's nice value and execs the job
            return (escorted if escort_later else capable), \
                [helper, *exec_at_nice(nice), str(round(target))]
        from market_timers.runner.instant_wait import sleep_until

        # The job's nice value as the sleep ends, SPIN before the instant, not at it: lowering a
        # running task's priority makes the kernel reschedule it at once. Tried and measured
        # (bench/alternatives.py): keeping nice -10 until wait_for_instant() made a warm job's
        # action later, not earlier (p50 1.4 ms against 0.01 ms): the renice at the instant
        # handed the CPU to the other units starting around that second.
        sleep_until(target, before_spin=None if nice is None else lambda: set_nice(nice))
    set_nice(nice)
    return (escorted if escort_later else capable), []


def exec_at_nice(nice: int | None) -> list[str]:
    """market-timers-exec-at's option for the nice value it sets as its sleep ends (none: it
    leaves the priority alone)."""
    return [] if nice is None else ["--nice", str(nice)]


def exec_at_program() -> str | None:
    """market-timers-exec-at, next to the package's python (the venv's bin/), or None."""
    path = os.path.join(os.path.dirname(sys.executable), EXEC_AT)
    return path if os.access(path, os.X_OK) else None
