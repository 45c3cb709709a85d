"""A tiny helper for Python jobs: ready(), heartbeat(), status(text), on top of sdnotify.

    from market_timers.jobnotify import ready, heartbeat, status
    ready()
    for name in universe:
        work(name)
        heartbeat()          # under WatchdogSec=, at least once per interval

Outside systemd (no $NOTIFY_SOCKET) every call is a no-op, so a job runs the same by hand.
"""

from __future__ import annotations

import os

import sdnotify

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


def watchdog_interval() -> float | None:
    """Seconds between required heartbeats ($WATCHDOG_USEC), or None when no watchdog is armed."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec or os.environ.get("WATCHDOG_PID", str(os.getpid())) != str(os.getpid()):
        return None
    return int(usec) / 1e6
