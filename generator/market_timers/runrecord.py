"""Run records: one JSON file per (job, session) under <state_dir>/runs/<job>/<session>.json.

The runner writes `started` just before it execs the job; `ExecStopPost=market-timers-run --record`
completes the record with systemd's $SERVICE_RESULT / $EXIT_CODE / $EXIT_STATUS, so a record exists
even when the job was killed (watchdog, RuntimeMaxSec, SIGKILL). The deadman, the alert handlers and
`status` read them. Standard library only: this runs on the hot path.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def path_for(state_dir: str | os.PathLike, job: str, session: str) -> Path:
    from .runstart import record_path

    return Path(record_path(os.fspath(state_dir), job, session))


def read(state_dir: str | os.PathLike, job: str, session: str) -> dict | None:
    try:
        return json.loads(path_for(state_dir, job, session).read_text())
    except (FileNotFoundError, ValueError):
        return None


def update(state_dir: str | os.PathLike, job: str, session: str, **fields) -> dict:
    """Merge fields into the record (atomic rename; readers never see half a file)."""
    path = path_for(state_dir, job, session)
    record = read(state_dir, job, session) or {"job": job, "session": session}
    record.update(fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return record


def all_records(state_dir: str | os.PathLike, job: str | None = None) -> list[dict]:
    """Every readable record (of one job, or of all), oldest session first within a job."""
    root = Path(state_dir) / "runs"
    pattern = f"{job}/*.json" if job else "*/*.json"
    out = []
    for path in sorted(root.glob(pattern)) if root.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("job"):
            record.setdefault("session", path.stem)
            out.append(record)
    return out
