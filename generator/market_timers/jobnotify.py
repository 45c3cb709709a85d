"""A tiny helper for Python jobs: ready(), heartbeat(), status(text), on top of sdnotify.

    from market_timers.jobnotify import ready, heartbeat, status
    ready()
    for name in universe:
        work(name)
        heartbeat()          # under WatchdogSec=, at least once per interval

Outside systemd (no $NOTIFY_SOCKET) every call is a no-op, so a job runs the same by hand.

A warm job (`warm = "10s"`: exec'd that long before its instant) imports its libraries and
connects to its broker, then blocks until the instant:

    from market_timers.jobnotify import wait_for_instant
    broker = connect()
    wait_for_instant()       # returns at the planned instant (at once when run by hand)
    broker.send(orders)

`event(kind, ...)` hands an event of the trading system (a disconnect, a rejection...) to
market-timers' router: it is spooled durably and routed by the `[events]` rules of the config.
Any process of the host may call it: a job, or a gateway running as its own user in the
market-timers group (see "Events from your trading system" in docs/guide.md).

    from market_timers.jobnotify import event
    event("rejected", key=order_id, text=reason)      # True once spooled
"""

from __future__ import annotations

import os

import sdnotify

from market_timers.contracts import environment

_notifier: sdnotify.SystemdNotifier | None = None


def _send(message: str) -> None:
    global _notifier
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    if _notifier is None:
        _notifier = sdnotify.SystemdNotifier()
    _notifier.notify(message)


def ready() -> None:
    _send("READY=1")


def heartbeat() -> None:
    _send("WATCHDOG=1")


def status(text: str) -> None:
    _send("STATUS=" + " ".join(text.split()))


def wait_for_instant() -> float | None:
    """Block until the run's planned instant ($MARKET_SCHEDULED_UTC, set by the runner) on the
    realtime clock; return how late it woke in seconds (0 or more), or None without the variable
    (run by hand). Already past: returns at once with the lateness."""
    text = os.environ.get(environment.SCHEDULED_UTC, "")
    if not text:
        return None
    from datetime import UTC, datetime

    from market_timers.runner.instant_wait import sleep_until

    instant = datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC).timestamp()
    return sleep_until(instant)


def watchdog_interval() -> float | None:
    """Seconds between required heartbeats ($WATCHDOG_USEC), or None when no watchdog is armed."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec or os.environ.get("WATCHDOG_PID", str(os.getpid())) != str(os.getpid()):
        return None
    return int(usec) / 1e6


def event(kind: str, *, key: str = "", severity: str = "", text: str = "", job: str = "",
          session: str = "", value: float | None = None, at: float | None = None) -> bool:
    """Spool an event for the router; True once it is on disk (fsync + rename, no lock taken).

    Never raises for a disk problem: a full or read-only spool falls back to /run, then to a
    line on stderr at priority crit, and returns False. A bad argument (kind not
    [a-z][a-z0-9_.-]*, unknown severity, a value that is not a number) raises ValueError.
    `job`/`session` default to $MARKET_JOB/$MARKET_SESSION; `at` is a POSIX time (default now).
    """
    from market_timers.events.spool import emit  # os and time only: cheap for a job

    return emit(kind, key=key, severity=severity, text=text, job=job, session=session,
                value=value, at=at) is not None
