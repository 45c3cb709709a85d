"""The journal lines of the commands that systemd runs (handlers, deadman, refresh, outbox): the
runner writes the same sd-daemon(3) prefixes itself (runner/start.py `log`), import-light.

Under systemd (stderr connected to the journal, $JOURNAL_STREAM set) each line carries an
sd-daemon(3) priority prefix, so `journalctl -p warning` finds warnings and errors.
"""

from __future__ import annotations

import logging
import os
import sys

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
             logging.CRITICAL: 2}


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (tests capture it; the journal under systemd)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if os.environ.get("JOURNAL_STREAM"):
            return f"<{_PRIORITY.get(record.levelno, 6)}>{text}"
        return text


def setup() -> None:
    root = logging.getLogger("market_timers")
    if not root.handlers and not logging.getLogger().handlers:
        handler = _Stderr()
        handler.setFormatter(_Format("%(levelname)s %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
