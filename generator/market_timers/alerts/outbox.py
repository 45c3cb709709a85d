"""The durable outbox: one JSON file per alert in `<spool_dir>/outbox/`.

An alert is written (temp file, fsync, rename, fsync of the directory) before any send is tried
and removed only after a confirmed delivery, so a crash or a kill mid-send loses nothing and the
resend carries the same id. Senders serialise on `outbox/.lock` (flock): the handler's immediate
try takes it without waiting and leaves the alert to the outbox timer when it is busy.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from market_timers.alerts.model import Alert


def atomic_write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_lock(path: Path) -> int:
    """A lock file's fd; read-only when root created it (flock works on any fd)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def read_json(path: Path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


class Outbox:
    def __init__(self, spool_dir: str | os.PathLike):
        self.dir = Path(spool_dir) / "outbox"

    def path(self, alert: Alert) -> Path:
        return self.dir / f"{alert.spool_name or alert.id}.json"

    def put(self, alert: Alert) -> None:
        if not alert.spool_name:
            alert.spool_name = alert.id
        atomic_write_json(self.path(alert), alert.to_json())

    def remove(self, alert: Alert) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(alert).unlink()
            fsync_dir(self.dir)

    def exists(self, alert: Alert) -> bool:
        return self.path(alert).exists()

    def load_all(self) -> list[Alert]:
        if not self.dir.is_dir():
            return []
        alerts = []
        for path in sorted(self.dir.glob("*.json")):
            data = read_json(path)
            if isinstance(data, dict) and data.get("id"):
                alerts.append(Alert.from_json(data))
        alerts.sort(key=lambda a: (a.created, a.spool_name))
        return alerts

    @contextlib.contextmanager
    def lock(self, wait: bool):
        """Yield True while holding the senders' lock, False when `wait` is off and it is busy."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = open_lock(self.dir / ".lock")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)
