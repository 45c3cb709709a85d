"""The metrics' own durable files under <state_dir>/metrics/ (State: the lock, the small JSON
files sync, refresh and the ledger scan leave; the append-only history is history.py's), and
catch_up(), which brings the history up to date from the run records and the plan."""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path

from market_timers.contracts import planfile
from market_timers.files import atomicfile
from market_timers.metrics.history import NAME as HISTORY
from market_timers.metrics.history import History, entries
from market_timers.metrics.records import is_finished, run_key, run_kind

SUBDIR = "metrics"


class State:
    """The metrics' own files under <state_dir>/metrics/."""

    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / SUBDIR

    def lock(self) -> atomicfile.flock:
        from market_timers.files.safefs import lock

        return lock(self.dir / "lock", base=self.state_dir)

    def history(self) -> list[dict]:
        """Every line of the history, parsed (tools and tests; the writers use history.py)."""
        try:
            return entries((self.dir / HISTORY).read_bytes())
        except FileNotFoundError:
            return []

    def read(self, name: str) -> dict:
        try:
            doc = json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def write(self, name: str, doc: dict) -> None:
        atomicfile.write(self.dir / name, json.dumps(doc, indent=1, sort_keys=True) + "\n",
                         mode=0o640, sync=atomicfile.DURABLE)


def catch_up(config, state: State, view, plan: planfile.PlanDoc, now: datetime) -> History:
    """Append to the history what it does not have yet: the finished runs among those the ledger
    scan read (`view`: scan.LedgerView), the sessions now missed. Returns the history (its
    tallies; the caller saves and closes it)."""
    from market_timers.config.watch import watch_of
    from market_timers.contracts.planfile import deadline

    history = History(state, reread=view.full)
    try:
        new, seen = [], set()
        for rec in view.records:
            if is_finished(rec) and (key := run_key(rec)) not in seen \
                    and not history.has(key):
                seen.add(key)
                new.append({"key": key, "job": rec["job"], "session": rec["session"],
                            "kind": run_kind(rec), "finished_utc": rec.get("finished_utc")})
        jobs = {j.name for j in config.jobs}
        slack = watch_of(config).slack_sec
        for entry in plan.entries:
            pair = entry.key
            key = f"missed|{pair[0]}|{pair[1]}"
            if pair[0] not in jobs or pair in view.ran or key in seen:
                continue
            with contextlib.suppress(KeyError, ValueError):
                if deadline(entry.json, slack) < now and not history.has(key):
                    seen.add(key)
                    new.append({"key": key, "job": pair[0], "session": pair[1],
                                "kind": "missed", "fire_utc": entry.fire_utc})
        history.append(new)
    except BaseException:
        history.close()
        raise
    return history
