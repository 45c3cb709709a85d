"""The events processor's state under `<state_dir>/events/`, changed only under `.lock`.

* `state.json`             open incidents, per-session counts, ids of the last processed events
* `sessions/<session>.json` the session's incidents (open and resolved) and count summaries,
                            for `status`, the digest and `incidents`

Each file is replaced atomically (atomicfile, DURABLE): a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from market_timers.files import atomicfile

COUNT_SESSIONS = 5  # sessions whose counts stay in state.json (their summaries stay in sessions/)
SEEN_KEEP = 2000  # event ids remembered: a crash between routing and unlinking is not a repeat


def _write(path: Path, data) -> None:
    atomicfile.write(path, json.dumps(data, indent=1, sort_keys=True) + "\n", mode=0o644,
                     sync=atomicfile.DURABLE, make_dirs=True)


def _read(path: Path, default):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return default
    return value if isinstance(value, type(default)) else default


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "_"


class Store:
    def __init__(self, state_dir: str | os.PathLike):
        self.dir = Path(state_dir) / "events"
        self.state = {"open": {}, "counts": {}, "seen": []}

    @contextlib.contextmanager
    def locked(self):
        """Hold the processor's lock (one processor at a time) with the state loaded."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with atomicfile.flock(os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o640)):
            self.load()
            yield self

    def load(self) -> None:
        state = _read(self.dir / "state.json", {})
        self.state = {"open": state.get("open") or {}, "counts": state.get("counts") or {},
                      "seen": state.get("seen") or []}

    def save(self) -> None:
        self.state["seen"] = self.state["seen"][-SEEN_KEEP:]
        counts = self.state["counts"]
        recent = sorted({c.get("session", "") for c in counts.values()})[-COUNT_SESSIONS:]
        self.state["counts"] = {k: c for k, c in counts.items() if c.get("session") in recent}
        _write(self.dir / "state.json", self.state)

    # processed events -------------------------------------------------------------------------
    def seen(self, event_id: str) -> bool:
        return event_id in self.state["seen"]

    def mark_seen(self, event_id: str) -> None:
        self.state["seen"].append(event_id)

    # incidents --------------------------------------------------------------------------------
    @property
    def open(self) -> dict[str, dict]:
        return self.state["open"]

    def counts(self) -> dict[str, dict]:
        return self.state["counts"]

    def session_path(self, session: str) -> Path:
        return self.dir / "sessions" / f"{_safe(session)}.json"

    def session_doc(self, session: str) -> dict:
        doc = _read(self.session_path(session), {})
        return {"incidents": doc.get("incidents") or [], "counts": doc.get("counts") or []}

    def put_incident(self, incident: dict) -> None:
        """Insert or replace (by id) the incident in its session's log."""
        doc = self.session_doc(incident["session"])
        doc["incidents"] = [i for i in doc["incidents"] if i.get("id") != incident["id"]]
        doc["incidents"].append(dict(incident))
        doc["incidents"].sort(key=lambda i: (i.get("opened", ""), i.get("id", "")))
        _write(self.session_path(incident["session"]), doc)

    def put_count(self, summary: dict) -> None:
        doc = self.session_doc(summary["session"])
        doc["counts"] = [c for c in doc["counts"] if c.get("kind") != summary["kind"]]
        doc["counts"].append(dict(summary))
        _write(self.session_path(summary["session"]), doc)

    def sessions(self) -> list[str]:
        d = self.dir / "sessions"
        return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def read_session(state_dir: str | os.PathLike, session: str) -> dict:
    """A session's incidents and counts, without the lock (for status and the digest)."""
    return Store(state_dir).session_doc(session)


def read_open(state_dir: str | os.PathLike) -> list[dict]:
    store = Store(state_dir)
    store.load()
    return sorted(store.open.values(), key=lambda i: i.get("opened", ""))
