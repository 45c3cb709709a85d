"""Small JSON stores under `<state_dir>/alerts/`, updated under one flock.

* `dedup.json`            key -> {"id", "sent", "count"}: the dedup window, as last compacted
* `dedup.jsonl`           entries recorded since, one JSON line each (the later line wins)
* `jobs/<job>.json`       the job's last outcome (ok | failed | missed) and, under "open", its
                          unresolved incidents by session: {"outcome", "alert_id", "chain",
                          "severity", "at"} (a file of the per-job format, without "open",
                          reads as the one incident of its last failed/missed session)
* `channels.json`         channel -> not-before instant (a 429 applies to the whole channel)
* `events/<session>.jsonl` every run outcome and alert of a session, for the digest
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.alerts.incidents import is_try
from market_timers.alerts.model import parse_iso
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile, safefs

INCIDENT_FIELDS = ("outcome", "at", "alert_id", "chain", "severity")
COMPACT_AFTER = 1000  # journal lines before the dedup table is rewritten whole


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name) or "_"


def _instant(value) -> datetime | None:
    try:
        return parse_iso(value) if isinstance(value, str) else None
    except ValueError:
        return None


class AlertState:
    def __init__(self, state_dir: str | os.PathLike):
        self.base = Path(state_dir)
        self.dir = self.base / "alerts"
        # the dedup table as read: [both files' signatures, table, journal lines since compaction]
        self._dedup: list | None = None

    def read(self, path: Path, default=None):
        """The JSON document; `default` when missing, unreadable, or not of default's type (a
        corrupted state file must not stop an alert)."""
        doc = safefs.read_json(path, base=self.base, default=default)
        if isinstance(default, dict) and not isinstance(doc, dict):
            return default
        return doc

    def write(self, path: Path, doc) -> None:
        safefs.write_json(path, doc, base=self.base, sync=atomicfile.DURABLE)

    def locked(self) -> atomicfile.flock:
        return safefs.lock(self.dir / ".state.lock", base=self.base)

    # dedup window ---------------------------------------------------------------------------
    # dedup.json is the table as of the last compaction; dedup.jsonl appends one whole entry
    # ({"k": key, "id", "sent", "count"}) per record or hit, fsync'd: a record costs one short
    # durable write, not a rewrite of the table (a 10,000-event flood rewrote and re-parsed it
    # per alert: quadratic). Replaying a line twice is harmless (each carries the whole entry).
    # The table is read once and kept while neither file changes under someone else's hand.
    def _dedup_files(self) -> tuple[Path, Path]:
        return self.dir / "dedup.json", self.dir / "dedup.jsonl"

    @staticmethod
    def _signature(path: Path):
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _dedup_table(self) -> dict:
        snapshot, journal = self._dedup_files()
        signature = (self._signature(snapshot), self._signature(journal))
        if self._dedup is not None and self._dedup[0] == signature:
            return self._dedup[1]
        table = self.read(snapshot, {})
        lines = 0
        with contextlib.suppress(OSError):
            text = safefs.read_bytes(journal, base=self.base).decode("utf-8", "replace")
            for line in text.splitlines():
                lines += 1
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict) and isinstance(entry.get("k"), str):
                        key = entry.pop("k")
                        table[key] = entry
        self._dedup = [signature, table, lines]
        return table

    def _dedup_put(self, key: str, entry: dict, now: datetime, window_minutes: float) -> None:
        snapshot, journal = self._dedup_files()
        table = self._dedup_table()
        table[key] = entry
        line = json.dumps({"k": key, **entry}, sort_keys=True) + "\n"
        safefs.append(journal, line.encode(), base=self.base, durable=True)
        self._dedup[2] += 1
        if self._dedup[2] >= COMPACT_AFTER:
            horizon = now - timedelta(minutes=max(window_minutes, 1) * 4)
            live = {k: v for k, v in table.items()
                    if isinstance(v, dict) and (_instant(v.get("sent")) or now) > horizon}
            self.write(snapshot, live)  # durable before the journal goes
            safefs.unlink(journal, base=self.base)
            table.clear()
            table.update(live)
            self._dedup[2] = 0
        self._dedup[0] = (self._signature(snapshot), self._signature(journal))

    def dedup_hit(self, key: str, now: datetime, window_minutes: float) -> str | None:
        """The id of the alert already sent for `key` inside the window (and count this one)."""
        if window_minutes <= 0:
            return None
        entry = self._dedup_table().get(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            return None
        sent = _instant(entry.get("sent"))
        if sent is None or now - sent >= timedelta(minutes=window_minutes):
            return None
        count = entry.get("count", 0)
        self._dedup_put(key, {**entry, "count": (count if isinstance(count, int) else 0) + 1},
                        now, window_minutes)
        return entry["id"]

    def dedup_record(self, key: str, alert_id: str, now: datetime, window_minutes: float) -> None:
        self._dedup_put(key, {"id": alert_id, "sent": iso(now), "count": 0}, now, window_minutes)

    # per-job last outcome and open incidents ------------------------------------------------
    def job_outcome(self, job: str) -> dict:
        return self.read(self.dir / "jobs" / f"{_safe(job)}.json", {}) or {}

    def open_incidents(self, job: str) -> dict[str, dict]:
        """The job's unresolved failures/misses by session (see the module's doc)."""
        doc = self.job_outcome(job)
        table = doc.get("open")
        if isinstance(table, dict):
            return {s: v for s, v in table.items() if isinstance(v, dict)}
        if doc.get("outcome") in ("failed", "missed") and isinstance(doc.get("session"), str):
            return {doc["session"]: {k: doc.get(k) for k in INCIDENT_FIELDS if k in doc}}
        return {}

    def set_job_outcome(self, job: str, outcome: str, now: datetime, *, session: str = "",
                        still_open: dict | None = None, **extra) -> None:
        """Keep the job's last outcome; a failure or miss (not a try's) opens its session's
        incident; `still_open` replaces the open incidents (a success resolving some)."""
        table = self.open_incidents(job) if still_open is None else dict(still_open)
        if outcome in ("failed", "missed") and not is_try(session):
            table[session] = {"outcome": outcome, "at": iso(now), **extra}
        self.write(self.dir / "jobs" / f"{_safe(job)}.json",
                   {"outcome": outcome, "at": iso(now), "session": session, **extra,
                    "open": table})

    def jobs(self) -> list[str]:
        """The jobs with a kept outcome (their file names)."""
        return sorted(n.removesuffix(".json") for n in safefs.listdir(self.dir / "jobs",
                                                                     base=self.base)
                      if n.endswith(".json") and not n.startswith("."))

    def acknowledge(self, alert_id: str, now: datetime) -> bool:
        """Mark the open incident(s) whose alert is `alert_id` acknowledged (they stay open
        until a success resolves them); True when one was not yet."""
        found = False
        for job in self.jobs():
            doc = self.job_outcome(job)
            table = self.open_incidents(job)
            hits = [s for s, inc in table.items()
                    if inc.get("alert_id") == alert_id and not inc.get("acked")]
            for session in hits:
                table[session]["acked"] = iso(now)
            if hits:
                self.write(self.dir / "jobs" / f"{job}.json", {**doc, "open": table})
                found = True
        return found

    # channel rate limits --------------------------------------------------------------------
    def channel_not_before(self, channel: str) -> datetime | None:
        return _instant(self.read(self.dir / "channels.json", {}).get(channel))

    def set_channel_not_before(self, channel: str, when: datetime) -> None:
        path = self.dir / "channels.json"
        table = self.read(path, {})
        table[channel] = iso(when)
        self.write(path, table)

    # session events (digest) ----------------------------------------------------------------
    def add_event(self, session: str, event: dict) -> None:
        line = json.dumps(event, sort_keys=True) + "\n"
        safefs.append(self.dir / "events" / f"{_safe(session or 'none')}.jsonl", line.encode(),
                      base=self.base)

    def events(self, session: str) -> list[dict]:
        path = self.dir / "events" / f"{_safe(session)}.jsonl"
        out = []
        with contextlib.suppress(OSError):
            text = safefs.read_bytes(path, base=self.base).decode("utf-8", "replace")
            for line in text.splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def sessions(self) -> list[str]:
        return sorted(n.removesuffix(".jsonl") for n in safefs.listdir(self.dir / "events",
                                                                      base=self.base)
                      if n.endswith(".jsonl"))
