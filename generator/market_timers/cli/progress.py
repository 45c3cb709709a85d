"""Progress of a long call on a terminal: `started 5,000/10,000 timers`, rewritten in place on
stderr after each chunk (host/systemctl.py sends CHUNK units a call). Only on a terminal: a
pipe, a log or the refresh's journal gets no line of it; and not for a call of one chunk."""

from __future__ import annotations

import sys

from market_timers.host.systemctl import CHUNK

WORDS = {"start": ("started", "timers"), "stop": ("stopped", "units")}


class TerminalProgress:
    def __init__(self, stream):
        self.stream = stream

    def __call__(self, verb: str, done: int, total: int) -> None:
        if total <= CHUNK:
            return
        past, what = WORDS.get(verb, (verb, "units"))
        self.stream.write(f"\r{past} {done:,}/{total:,} {what}" + ("\n" if done >= total else ""))
        self.stream.flush()


def for_terminal(stream=None) -> TerminalProgress | None:
    """A progress line on `stream` (stderr) when it is a terminal, else None."""
    stream = stream or sys.stderr
    return TerminalProgress(stream) if stream.isatty() else None
