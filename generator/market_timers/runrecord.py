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
    """The record, or None. Root (deadman, status) reads these: no symlink is followed."""
    from .safefs import SymlinkRefused, read_bytes

    try:
        return json.loads(read_bytes(path_for(state_dir, job, session), base=state_dir))
    except (FileNotFoundError, SymlinkRefused, ValueError):
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
    from .safefs import read_bytes

    root = Path(state_dir) / "runs"
    out = []
    jobs = [job] if job else _names(root, state_dir)
    paths = [root / j / n for j in jobs if "/" not in j and j not in (".", "..")
             for n in _names(root / j, state_dir) if n.endswith(".json")]
    for path in sorted(paths):
        try:
            record = json.loads(read_bytes(path, base=state_dir))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("job"):
            record.setdefault("session", path.stem)
            out.append(record)
    return out


def _names(directory: Path, state_dir) -> list[str]:
    from .safefs import listdir

    try:
        return listdir(directory, base=state_dir)
    except OSError:  # a symlink or a file where a job's directory should be
        return []
