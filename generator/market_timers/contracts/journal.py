"""The journal lines of the commands that systemd runs (handlers, deadman, refresh, outbox): the
runner writes the same sd-daemon(3) prefixes itself (runner/start.py `log`), import-light.

Under systemd (stderr connected to the journal, $JOURNAL_STREAM set) each line carries an
sd-daemon(3) priority prefix, so `journalctl -p warning` finds warnings and errors. A line about
one job's session (logged with `extra=about(job, session)`) goes to the journal with the fields
MARKET_JOB and MARKET_SESSION instead, as the job's own lines have them (LogExtraFields= of its
unit), so that `journalctl MARKET_JOB=closing-orders` also finds "missed" and "alert ... sent".

The fields need journald's native protocol (a datagram to /run/systemd/journal/socket, the format
of systemd.journal-fields(7)'s senders): written here in a few lines rather than with
python-systemd, which is a C extension built against libsystemd-dev that the package's venv
would have to compile; a line that cannot be sent so goes to stderr as before.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
             logging.CRITICAL: 2}


SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "market-timers"


def about(job: str | None, session: str | None = None) -> dict:
    """`extra=` for a log line about a job's session: its journal fields."""
    fields = {}
    if job:
        fields["MARKET_JOB"] = str(job)
    if session:
        fields["MARKET_SESSION"] = str(session)
    return {"journal_fields": fields}


def _field(name: str, value: str) -> bytes:
    data = value.encode("utf-8", "replace")
    if b"\n" not in data:
        return name.encode() + b"=" + data + b"\n"
    return name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"


def send(message: str, priority: int, fields: dict[str, str], path: str | None = None) -> bool:
    """One journal entry with these fields (native protocol); False when it could not be sent."""
    payload = b"".join([_field("MESSAGE", message), _field("PRIORITY", str(priority)),
                        _field("SYSLOG_IDENTIFIER", IDENTIFIER),
                        *(_field(k, v) for k, v in sorted(fields.items()))])
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(payload, path or SOCKET)
        return True
    except OSError:  # no journald (a container without it), or an entry too large
        return False


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (tests capture it; the journal under systemd).
    A line with journal fields goes to the journal natively when stderr is the journal."""

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "journal_fields", None)
        if fields and os.environ.get("JOURNAL_STREAM"):
            try:
                text = logging.Formatter("%(levelname)s %(message)s").format(record)
            except Exception:
                self.handleError(record)
                return
            if send(text, _PRIORITY.get(record.levelno, 6), fields):
                return
        super().emit(record)

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


def handler() -> logging.Handler:
    """The package's log handler: stderr with a priority prefix, or the journal with fields."""
    out = _Stderr()
    out.setFormatter(_Format("%(levelname)s %(message)s"))
    return out


def setup() -> None:
    root = logging.getLogger("market_timers")
    if not root.handlers and not logging.getLogger().handlers:
        root.addHandler(handler())
        root.setLevel(logging.INFO)
