"""Unacknowledged critical alerts repeat every `repeat_minutes` until `ack` or the recovery.

One record per open critical in `<state_dir>/alerts/active/<id>.json`. The outbox timer calls
`due_repeats` every minute: a repeat is a copy of the alert with the same id and `repeat = n`,
spooled as `<id>.r<n>`; at repeat `escalate_after` one more copy (`<id>.r<n>.esc`) goes to the
escalation channel, once. No repeat is queued while an earlier notice of the same id is still
waiting in the outbox: a channel that is down does not pile up copies.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.alerts.incidents import occurrence
from market_timers.alerts.model import PENDING, Alert, parse_iso
from market_timers.alerts.outbox import Outbox, check_alert
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile, safefs


class Escalations:
    def __init__(self, state_dir: str | os.PathLike):
        self.base = Path(state_dir)
        self.dir = self.base / "alerts" / "active"

    def _path(self, alert_id: str) -> Path:
        return self.dir / f"{alert_id}.json"

    def _write(self, path: Path, doc: dict) -> None:
        safefs.write_json(path, doc, base=self.base, sync=atomicfile.DURABLE)

    def record(self, alert_id: str) -> dict | None:
        doc = safefs.read_json(self._path(alert_id), base=self.base)
        return doc if isinstance(doc, dict) and isinstance(doc.get("alert"), dict) else None

    def save(self, alert_id: str, record: dict) -> None:
        self._write(self._path(alert_id), record)

    def open(self, alert: Alert, now: datetime, repeat_minutes: float) -> None:
        self._write(self._path(alert.id), {
            "alert": alert.to_json(), "repeats": 0, "escalated": False,
            "next": iso(now + timedelta(minutes=repeat_minutes))})

    def active(self) -> list[dict]:
        records = [safefs.read_json(self.dir / n, base=self.base)
                   for n in safefs.listdir(self.dir, base=self.base) if n.endswith(".json")]
        return [r for r in records if _valid(r)]

    def close(self, alert_id: str) -> bool:
        return safefs.unlink(self._path(alert_id), base=self.base)

    def close_job(self, job: str, resolved: Callable[[str], bool]) -> list[str]:
        """Close the open criticals of `job` whose session a success `resolved` (see
        alerts/incidents.py); return their ids."""
        closed = [r["alert"]["id"] for r in self.active() if r["alert"].get("job") == job
                  and resolved(occurrence(str(r["alert"].get("session") or ""),
                                          str((r["alert"].get("details") or {}).get("slot")
                                              or "")))]
        for alert_id in closed:
            self.close(alert_id)
        return closed

    def close_incident(self, key_prefix: str) -> list[str]:
        """Close the open criticals whose key starts with `key_prefix` (one incident's alerts,
        one per channel: a halt's); return their ids."""
        closed = [r["alert"]["id"] for r in self.active()
                  if str(r["alert"].get("key") or "").startswith(key_prefix)]
        for alert_id in closed:
            self.close(alert_id)
        return closed

    def due_repeats(self, outbox: Outbox, now: datetime, repeat_minutes: float,
                    escalate_after: int, escalation_channel: str) -> list[Alert]:
        """Queue the repeats that are due into the outbox and return them."""
        queued: list[Alert] = []
        # (id, channel) of the notices still undelivered; channel None: the whole chain's
        waiting = {(a.id, a.chain[0] if a.fanout and a.chain else None)
                   for a in outbox.load_all()}
        for record in self.active():
            due = parse_iso(record.get("next"))
            if due is None or now < due:
                continue
            base = Alert.from_json(record["alert"])
            record["next"] = iso(now + timedelta(minutes=repeat_minutes))
            # the last notice is still undelivered: no new copy (on that channel only, for an
            # alert told on every channel)
            base.fanout = [c for c in base.fanout if (base.id, c) not in waiting]
            if (base.id, None) in waiting or (record["alert"].get("fanout") and not base.fanout):
                self._write(self._path(base.id), record)
                continue
            record["repeats"] += 1
            n = record["repeats"]
            fresh = dict(attempts=0, channel_index=0, channel_since="", not_before="",
                         state=PENDING, last_error="", errors=[], repeat=n)
            copies = outbox.put_copies(replace(base, spool_name=f"{base.id}.r{n}", **fresh))
            if escalate_after and n >= escalate_after and escalation_channel \
                    and not record["escalated"]:
                record["escalated"] = True
                copies.append(replace(base, spool_name=f"{base.id}.r{n}.esc",
                                      title=f"ESCALATED: {base.title}", fanout=[],
                                      chain=[escalation_channel], **fresh))
                outbox.put(copies[-1])
            self._write(self._path(base.id), record)
            queued += copies
        return queued

    def drop_pending_repeats(self, outbox: Outbox, ids: list[str]) -> None:
        for alert in outbox.load_all():
            if alert.id in ids and alert.repeat:
                with contextlib.suppress(OSError):
                    outbox.remove(alert)


def _valid(record) -> bool:
    """A repeat record we can act on (a corrupted one is skipped, never stops the flush)."""
    return (isinstance(record, dict) and check_alert(record.get("alert")) is None
            and isinstance(record.get("next"), str) and isinstance(record.get("repeats"), int)
            and not isinstance(record.get("repeats"), bool))
