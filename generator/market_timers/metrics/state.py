"""The metrics' own durable files under <state_dir>/metrics/ (State: the lock, the append-only
history, the small JSON files sync, refresh and the ledger scan leave), and catch_up(), which
brings the history up to date from the run records and the plan."""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path

from .. import atomicfile, planfile
from .records import is_finished, run_key, run_kind

SUBDIR = "metrics"


class State:
    """The metrics' own files under <state_dir>/metrics/."""

    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / SUBDIR

    def lock(self) -> atomicfile.flock:
        from ..safefs import lock

        return lock(self.dir / "lock", base=self.state_dir)

    def history(self) -> list[dict]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for line in (self.dir / "history.jsonl").read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict) and entry.get("key") and entry.get("job"):
                        out.append(entry)
        return out

    def append_history(self, entries: list[dict]) -> None:
        if not entries:
            return
        data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries).encode()
        fd = os.open(self.dir / "history.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, name: str) -> dict:
        try:
            doc = json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def write(self, name: str, doc: dict) -> None:
        atomicfile.write(self.dir / name, json.dumps(doc, indent=1, sort_keys=True) + "\n",
                         mode=0o640, sync=atomicfile.DURABLE)


def catch_up(config, state: State, view, plan: planfile.PlanDoc, now: datetime) -> list[dict]:
    """Append to the history what it does not have yet: the finished runs among those the ledger
    scan read (`view`: scan.LedgerView), the sessions now missed. Returns the whole history."""
    from ..watch.config import watch_of
    from ..watch.fires import deadline

    history = state.history()
    known = {e["key"] for e in history}
    new = []
    for rec in view.records:
        if is_finished(rec) and (key := run_key(rec)) not in known:
            known.add(key)
            new.append({"key": key, "job": rec["job"], "session": rec["session"],
                        "kind": run_kind(rec), "finished_utc": rec.get("finished_utc")})
    jobs = {j.name for j in config.jobs}
    slack = watch_of(config).slack_sec
    for entry in plan.entries:
        pair = entry.key
        key = f"missed|{pair[0]}|{pair[1]}"
        if pair[0] not in jobs or pair in view.ran or key in known:
            continue
        with contextlib.suppress(KeyError, ValueError):
            if deadline(entry.json, slack) < now:
                known.add(key)
                new.append({"key": key, "job": pair[0], "session": pair[1], "kind": "missed",
                            "fire_utc": entry.fire_utc})
    state.append_history(new)
    return history + new
