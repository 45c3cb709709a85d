"""Sleep until an instant of the realtime clock: the runner's pre-fire wait, and
jobnotify.wait_for_instant() in a warm job.

Python 3.11 has neither time.clock_nanosleep (an absolute CLOCK_REALTIME deadline) nor
os.timerfd_create (3.13); ctypes could call clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME), but it
costs an import of a few ms and a foreign call per platform. This loop is the same thing in
effect, in the standard library: each step is computed afresh from time.time() (nothing
accumulates, so nothing drifts), a step of the realtime clock (NTP, an operator) is followed
within one step of at most MAX_STEP, and the last step ends within the kernel's timer slack
(50 us for a normal thread) of the deadline. Imports only `time`: the runner is on the hot path.
"""

from __future__ import annotations

import time

MAX_STEP = 0.25  # seconds


def sleep_until(deadline: float) -> float:
    """Sleep until time.time() >= deadline (unix seconds); return how late it woke, in seconds."""
    while True:
        remaining = deadline - time.time()
        if remaining <= 0:
            return -remaining
        time.sleep(min(remaining, MAX_STEP))
