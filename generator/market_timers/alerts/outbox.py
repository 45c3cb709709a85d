"""The durable outbox: one JSON file per alert in `<spool_dir>/outbox/`.

An alert is written (temp file, fsync, rename, fsync of the directory) before any send is tried
and removed only after a confirmed delivery, so a crash or a kill mid-send loses nothing and the
resend carries the same id. Senders serialise on `outbox/.lock` (flock): the handler's immediate
try takes it without waiting and leaves the alert to the outbox timer when it is busy.

A file that is not a valid alert (truncated, not JSON, a field missing or of the wrong type, a
symlink) is never skipped silently: `load_all` sets it aside in `bad`, `quarantine()` moves it to
`<spool_dir>/quarantine/` (the flush then raises one alert per file) and `outbox list` shows both.
Every open goes through safefs: no symlink under the spool directory is followed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from market_timers.alerts.model import Alert
from market_timers.contracts.severities import SEVERITY_RANK
from market_timers.files import atomicfile, safefs

QUARANTINE = "quarantine"
_ID_RE = re.compile(r"[0-9]{4}-[0-9a-f]{8}")  # model.make_id
_NAME_RE = re.compile(r"^[0-9]{4}-[0-9a-f]{8}(\.r[0-9]+(\.esc)?)?(\.to-[a-z]+)?\.json\Z")


def read_json(path: Path, default=None, base: Path | None = None):
    return safefs.read_json(path, base=base or path.parent, default=default)


@dataclass
class BadFile:
    name: str
    reason: str
    quarantined: bool = False


def check_alert(data: object) -> str | None:
    """Why `data` is not a valid spooled alert, or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    for key in ("id", "kind", "key", "title"):
        if not isinstance(data.get(key), str) or not data.get(key):
            return f"field {key!r} missing or not a string"
    if not _ID_RE.fullmatch(data["id"]):
        return "field 'id' is not an alert id"
    if data.get("severity") not in SEVERITY_RANK:
        return "field 'severity' missing or not critical/warning/info"
    types = {"text": str, "job": str, "session": str, "created": str, "details": dict,
             "chain": list, "channel_index": int, "attempts": int, "channel_since": str,
             "not_before": str, "state": str, "last_error": str, "errors": list,
             "suppressed": int, "repeat": int, "spool_name": str, "fanout": list}
    for key, kind in types.items():
        if key in data and (not isinstance(data[key], kind) or isinstance(data[key], bool)):
            return f"field {key!r} is not a {kind.__name__}"
    if not all(isinstance(c, str) for c in [*data.get("chain", []), *data.get("fanout", [])]):
        return "field 'chain' is not a list of channel names"
    return None


class Outbox:
    def __init__(self, spool_dir: str | os.PathLike):
        self.base = Path(spool_dir)
        self.dir = self.base / "outbox"
        self.quarantine_dir = self.base / QUARANTINE
        self.bad: list[BadFile] = []

    def path(self, alert: Alert) -> Path:
        return self.dir / f"{alert.spool_name or alert.id}.json"

    def put(self, alert: Alert) -> None:
        if not alert.spool_name:
            alert.spool_name = alert.id
        # DURABLE: the alert is on disk before any send is tried
        safefs.write_json(self.path(alert), alert.to_json(), base=self.base,
                          sync=atomicfile.DURABLE)

    def put_copies(self, alert: Alert) -> list[Alert]:
        """Spool the alert: itself, or one copy per channel of its fanout (none waits for
        another channel's failure); the copies spooled."""
        if not alert.fanout:
            self.put(alert)
            return [alert]
        stem = alert.spool_name or alert.id
        copies = [replace(alert, chain=[channel], spool_name=f"{stem}.to-{channel}")
                  for channel in alert.fanout]
        for copy in copies:
            self.put(copy)
        return copies

    def remove(self, alert: Alert) -> None:
        safefs.unlink(self.path(alert), base=self.base)

    def exists(self, alert: Alert) -> bool:
        try:
            fd = safefs.open_file(self.path(alert), os.O_RDONLY | os.O_NONBLOCK, base=self.base)
        except OSError:
            return False
        os.close(fd)
        return True

    def load_all(self) -> list[Alert]:
        """Every valid spooled alert, oldest first; invalid files are listed in `self.bad`."""
        alerts, self.bad = [], []
        for name in safefs.listdir(self.dir, base=self.base):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                data = json.loads(safefs.read_bytes(self.dir / name, base=self.base))
            except FileNotFoundError:  # delivered and removed meanwhile
                continue
            except safefs.SymlinkRefused:
                self.bad.append(BadFile(name, "a symlink, not a file (not followed)"))
                continue
            except OSError as e:
                self.bad.append(BadFile(name, f"unreadable ({e.strerror or type(e).__name__})"))
                continue
            except ValueError:
                self.bad.append(BadFile(name, "not valid JSON (truncated or corrupted)"))
                continue
            reason = check_alert(data)
            if reason is None and not _NAME_RE.match(name):
                reason = "file name is not an alert id"
            if reason:
                self.bad.append(BadFile(name, reason))
                continue
            alert = Alert.from_json(data)
            alert.spool_name = name.removesuffix(".json")
            alerts.append(alert)
        alerts.sort(key=lambda a: (a.created, a.spool_name))
        return alerts

    def quarantine(self) -> list[BadFile]:
        """Move the files `load_all` found bad into <spool_dir>/quarantine/; return those moved."""
        moved = []
        for bad in self.bad:
            target = self.quarantine_dir / bad.name
            n = 1
            while os.path.lexists(target):
                target = self.quarantine_dir / f"{bad.name}.{n}"
                n += 1
            try:
                safefs.rename(self.dir / bad.name, target, base=self.base)
            except FileNotFoundError:
                continue
            bad.quarantined = True
            bad.name = target.name
            moved.append(bad)
        return moved

    def quarantined(self) -> list[BadFile]:
        """What sits in the quarantine directory, with why (checked again now)."""
        out = []
        for name in safefs.listdir(self.quarantine_dir, base=self.base):
            if name.startswith("."):
                continue
            try:
                reason = check_alert(json.loads(safefs.read_bytes(self.quarantine_dir / name,
                                                                  base=self.base)))
            except safefs.SymlinkRefused:
                reason = "a symlink, not a file"
            except (OSError, ValueError):
                reason = "not valid JSON (truncated or corrupted)"
            out.append(BadFile(name, reason or "moved aside", quarantined=True))
        return out

    def lock(self, wait: bool) -> atomicfile.flock:
        """`with outbox.lock(wait) as held:` held is True while holding the senders' lock, False
        when `wait` is off and it is busy."""
        return safefs.lock(self.dir / ".lock", base=self.base, wait=wait)
