"""Sleep until an instant of the realtime clock: the runner's pre-fire wait, and
jobnotify.wait_for_instant() in a warm job.

Python 3.11 has neither time.clock_nanosleep (an absolute CLOCK_REALTIME deadline) nor
os.timerfd_create (3.13); ctypes could call clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME), but it
costs an import of a few ms and a foreign call per platform. This loop is the same thing in
effect, in the standard library: each step is computed afresh from time.time() (nothing
accumulates, so nothing drifts), and a step of the realtime clock (NTP, an operator) is followed
within one step of at most MAX_STEP.

The last SPIN seconds are spun on the clock, not slept: a sleeping thread's wake-up can come
milliseconds after its timer (measured in bench/alternatives.py on this project's VMs: p50 0.2 ms
but p95 2.4 ms for a warm job woken by time.sleep on an idle machine: the vCPU had halted), while
a thread that is running sees the deadline pass within a clock read. Spinning costs SPIN of one
CPU per fire, once: the price low-latency trading systems pay for the last millisecond.
Imports only `time`: the runner is on the hot path.
"""

import time

MAX_STEP = 0.25  # seconds
SPIN = 0.005  # seconds: longer than the wake-up latency measured (max 2.6 ms), 5 ms of CPU


def sleep_until(deadline: float, before_spin=None, spin: float = SPIN) -> float:
    """Sleep until time.time() >= deadline (unix seconds); return how late it woke, in seconds.
    `before_spin()`, if given, is called once as the sleeping ends and the spin begins. spin=0:
    sleeps only, for a waiter whose wake-up may be late (instant_escort.py)."""
    while True:
        remaining = deadline - time.time()
        if remaining <= 0:
            return -remaining
        if remaining > spin:  # also after a step back of the clock during the spin
            time.sleep(min(remaining - spin, MAX_STEP))
        elif before_spin is not None:
            before_spin()
            before_spin = None
