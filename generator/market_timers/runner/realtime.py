"""The escort of a pre-fired run: SCHED_FIFO lent to the run's process from just before its
instant to just after, while the job itself holds no privilege.

Why. At its instant a pre-fired run is either market-timers-exec-at (generator/exec_at.c)
spinning its last milliseconds before it execs the job, or a warm job spinning in
wait_for_instant() before it acts. At nice 0 either shares the CPUs with whatever else starts
in that second (other units' start-ups: fork, sandbox, Python), and a normal task that has
spun a few ms is preempted for a whole CFS/EEVDF slice when one of them wakes: measured in
bench/alternatives.py, a warm job's action p50 0.01 ms but p99 5.8 ms. A SCHED_FIFO task is
never preempted by a normal one; priority 1, the lowest real-time priority, takes nothing from
the kernel's own real-time threads.

How. A pre-fired one-shot or daily job's unit grants CAP_SYS_NICE (AmbientCapabilities=,
RestrictRealtime=no; render.py). After its claim, before its wait, the runner forks this
escort, which keeps the capability; just before the exec it empties its own capability sets
(drop_capabilities), so the job is exec'd with none: it cannot make itself real-time (its
RLIMIT_RTPRIO is 0) and cannot ptrace the escort (which holds more than it does). The escort
sleeps to BEFORE seconds before the instant, raises the run's main thread (pid == tid: one pid
for market-timers-exec-at and the job, exec'd in place of it; the runner's own pid for a unit of
an older version, which execs them in place, or the child it supervises: jobuser.py) to
SCHED_FIFO 1 with SCHED_RESET_ON_FORK (children the job starts run normally), sleeps to HOLD
seconds after the instant (and on while the run is still market-timers-exec-at, its exec of the
job not completed, up to HOLD_MAX), puts it back to the policy it had (SCHED_OTHER, or the one a drop-in's
CPUSchedulingPolicy= set; a job real-time by such a drop-in is left alone) and exits. If the job
ends first, systemd stops the escort with the unit (it is in the unit's cgroup).

Limits, on purpose: the main thread only (a warm job calls wait_for_instant() there). A job run
as its own user cannot stop its escort (another uid), and its RLIMIT_RTTIME (jobuser.py) ends a
spin under the lent policy; a job of an older unit, exec'd in place, that stops its escort keeps
priority 1 until it exits, and the kernel's real-time throttling
(kernel.sched_rt_runtime_us, 95% of each second by default) still leaves the rest of the host
CPU time. Without the capability (an older unit, a container that withholds it, a cgroup
without real-time budget) the escort says so in the journal and the run goes on as before.

Loaded by the runner only for a pre-fired wait, before it: os and time; ctypes for the capset(2)
the standard library lacks. The escort's own wait (instant_wait) is imported in the escort, after
the fork: the run never loads it.
"""

import ctypes
import os
import time

from market_timers.runner.start import WARNING, log

BEFORE = 0.05  # seconds before the instant: the run is still asleep, before its last-ms spin
HOLD = 0.1  # seconds after it: the exec, and a warm job's action (e.g. its orders), real-time
# An exec not completed by then (the job's file read from disk, a stalled host): the hold goes on
# while the run is still market-timers-exec-at, until the job's first instruction, at most this
# long after the instant.
HOLD_MAX = 1.0
EXEC_AT_COMM = "market-timers-exec-at"[:15]  # prefire.EXEC_AT as /proc/PID/comm shows it
CAP_SYS_NICE = 23
PRIORITY = 1


def has_cap_sys_nice(status: str = "/proc/self/status") -> bool:
    """CAP_SYS_NICE in this process's effective set (the unit's AmbientCapabilities=)."""
    from market_timers.runner.jobuser import has_capabilities  # loaded by every start already

    return has_capabilities(CAP_SYS_NICE, status=status)


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the
    pid, it names one process, so a pid reused by another process is never touched."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after "(comm)" start at field 3


def still_exec_at(pid: int) -> bool:
    """Whether the process is still market-timers-exec-at: the exec of the job not completed."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n") == EXEC_AT_COMM
    except OSError:
        return False


def start(instant: float, job: str, target: int | None = None) -> bool:
    """Fork the escort of this process (it will exec the job), or of `target` (the job's own
    process, which the runner supervises: jobuser.py); False when it is not worth it (the
    instant is past the hold already) or the fork failed. A double fork: the escort is
    reparented to the service manager, never a child the job would see or reap."""
    if time.time() > instant + HOLD:
        return False
    target = os.getpid() if target is None else target
    born = start_time(target)
    try:
        middle = os.fork()
    except OSError as e:
        log(WARNING, f"cannot fork the real-time escort of {job}: {e.strerror}")
        return False
    if middle == 0:
        code = 0
        try:
            if os.fork() == 0:
                # Not the lock file nor the cluster ledger's socket: the lock must die with
                # the job, not with its escort. stdout/stderr stay: the journal.
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                code = escort(target, born, instant, job)
        except BaseException:  # noqa: BLE001 - a forked child never returns into the runner
            code = 1
        os._exit(code)
    os.waitpid(middle, 0)
    return True


def escort(target: int, born: str | None, instant: float, job: str, *,
           before: float = BEFORE, hold: float = HOLD, hold_max: float = HOLD_MAX) -> int:
    """Raise target to SCHED_FIFO `before` s before instant, back to the policy it had `hold` s
    after (SCHED_OTHER, or a drop-in's CPUSchedulingPolicy=; one that is real-time already is
    left alone), or once its exec has completed, if it had not by then (at most `hold_max` s
    after the instant). 0 when done or the job has gone; 1 when the priority could not be raised
    (logged). Its sleeps do not spin: its own wake-up may be late without harm, and a spin
    would take the CPU the job is about to need."""
    from market_timers.runner.instant_wait import sleep_until

    sleep_until(instant - before, spin=0)
    if start_time(target) != born:
        return 0  # the job has ended (or failed to exec) in the meantime
    try:
        policy, param = os.sched_getscheduler(target), os.sched_getparam(target)
        if policy & ~os.SCHED_RESET_ON_FORK in (os.SCHED_FIFO, os.SCHED_RR):
            return 0  # real-time already (CPUSchedulingPolicy=): nothing to lend
        os.sched_setscheduler(target, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(PRIORITY))
    except ProcessLookupError:
        return 0
    except OSError as e:
        log(WARNING, f"cannot lend real-time priority to {job} for its instant ({e.strerror}); "
                     "it runs at normal priority, and on a busy host its action can come a few "
                     "ms late")
        return 1
    sleep_until(instant + hold, spin=0)
    while time.time() < instant + hold_max and still_exec_at(target) \
            and start_time(target) == born:
        time.sleep(0.005)
    if start_time(target) == born:
        try:
            os.sched_setscheduler(target, policy, param)
        except ProcessLookupError:
            pass
    return 0


# Loaded with the module, before the wait: the capset right before the exec costs a system call.
_libc = ctypes.CDLL(None, use_errno=True)


def drop_capabilities(before: str) -> None:
    """Empty this process's effective, permitted and inheritable sets (and so its ambient set)
    before `before` (the exec of the job, the record step): the capability was for the escort,
    never for them. A failure is logged, never raised (it has never been seen: lowering one's
    own capabilities needs no privilege), and the run goes on.

    ctypes, because neither the standard library nor Debian's python3 has capset(2) (libcap's
    Python bindings are not packaged for Debian 12); this is one system call with a fixed
    layout: header {version 3, pid 0 = this thread}, then two words of {effective, permitted,
    inheritable}, all zero. A root job gets its capabilities back from the exec, as usual."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        log(WARNING, f"cannot drop CAP_SYS_NICE before {before}: "
                     f"{os.strerror(ctypes.get_errno())}")
