"""A bound on the messages one source's events send, so that a flood cannot bury what matters.

A source is the event's job (`market-timers event --job`), else the one unnamed source (the
trading system). Per source and severity, at most `flood_limit` events of a `flood_window` (the
config's [events] keys, 20 and 5 min by default; fixed windows of the UTC clock) are sent one message each; the later ones of that window are held
back: each still goes to the session digest, and once the window is over one summary message
per source and window says how many were held back, of which kinds (at the worst severity held).
A critical is never held back by warnings: each severity has its own count.

The state is `<state_dir>/events/flood.json`, changed under the processor's lock (store.py's);
windows older than KEEP are forgotten.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.contracts.instants import iso
from market_timers.contracts.severities import SEVERITY_RANK
from market_timers.events.plan_lookup import parse_at
from market_timers.files import atomicfile

MESSAGES_PER_WINDOW = 20  # the defaults of [events] flood_limit and flood_window
WINDOW = timedelta(minutes=5)
KEEP = timedelta(days=2)
UNNAMED = "the trading system"


def window_of(at: datetime, window: timedelta = WINDOW) -> datetime:
    step = int(window.total_seconds())
    return datetime.fromtimestamp(int(at.timestamp()) // step * step, tz=at.tzinfo)


class FloodGate:
    def __init__(self, events_dir: Path, limit: int = MESSAGES_PER_WINDOW,
                 window: timedelta = WINDOW):
        self.limit, self.window = limit, window
        self.path = Path(events_dir) / "flood.json"
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = {}
        self.windows: dict[str, dict] = doc if isinstance(doc, dict) else {}
        self.changed = False

    def admit(self, source: str, severity: str, kind: str, at: datetime, session: str) -> bool:
        """Whether this event may send its own message (and count it either way)."""
        start = window_of(at, self.window)
        # the bound is kept with its window: a config changed meanwhile ends it as it began
        entry = self.windows.setdefault(f"{source}|{iso(start)}", {
            "source": source, "window": iso(start), "sent": {}, "held": 0, "kinds": {},
            "worst": "info", "session": session, "summarised": False, "limit": self.limit,
            "seconds": int(self.window.total_seconds())})
        self.changed = True
        sent = entry["sent"].get(severity, 0)
        if sent < entry.get("limit", self.limit):
            entry["sent"][severity] = sent + 1
            return True
        entry["held"] += 1
        entry["kinds"][kind] = entry["kinds"].get(kind, 0) + 1
        if SEVERITY_RANK.get(severity, 0) > SEVERITY_RANK.get(entry["worst"], 0):
            entry["worst"] = severity
        return False

    def due_summaries(self, now: datetime) -> list[dict]:
        """The windows over by `now` that held events back and were not summarised yet (marked
        summarised now); old windows are forgotten."""
        due = []
        for key, entry in list(self.windows.items()):
            end = parse_at(entry["window"]) + _length(entry)
            if end > now:
                continue
            if entry["held"] and not entry["summarised"]:
                entry["summarised"] = True
                due.append(entry)
            if end + KEEP <= now:
                del self.windows[key]
            self.changed = True
        return due

    def save(self) -> None:
        if self.changed:
            atomicfile.write(self.path, json.dumps(self.windows, sort_keys=True) + "\n",
                             mode=0o644, sync=atomicfile.DURABLE, make_dirs=True)
            self.changed = False


def _length(entry: dict) -> timedelta:
    """An entry's window (one written before the bound was a config key: the default)."""
    return timedelta(seconds=entry.get("seconds") or WINDOW.total_seconds())


def summary_text(entry: dict) -> tuple[str, str]:
    """(title, text) of a window's summary message."""
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(entry["kinds"].items(),
                                                     key=lambda kv: (-kv[1], kv[0])))
    start = parse_at(entry["window"])
    title = f"{entry['source']}: {entry['held']} more event(s) held back"
    length = _length(entry)
    text = (f"{title} between {entry['window']} and {iso(start + length)} ({kinds}): at most "
            f"{entry.get('limit', MESSAGES_PER_WINDOW)} messages per source, severity and "
            f"{_minutes(length)} are sent one by one ([events] flood_limit, flood_window); each "
            f"of these is in the digest of session {entry['session']}.")
    return title, text


def _minutes(length: timedelta) -> str:
    seconds = int(length.total_seconds())
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"
