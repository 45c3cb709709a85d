"""A periodic job's slot records on disk: one JSON file per slot under
<state_dir>/runs/<job>/<session>/ (the directory is the ledger's layout, ledger/__init__.py).

The runner's start writes a slot's first record (slotclock.write_new: no json on the start path);
this module reads them, merges fields into them (the record step, the accounting of skipped slots
in slotaccount.py) and prunes old sessions' records. Not on the runner's start path (json is fine
here).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from market_timers import ledger
from market_timers.files import atomicfile
from market_timers.runner.slotclock import record_path


def session_dir(state_dir, job: str, session: str) -> Path:
    return Path(ledger.slot_records_dir(state_dir, job, session))


def read_slots(state_dir, job: str, session: str) -> dict[str, dict]:
    """slot instant (Z text) -> its record, for every readable record of the session."""
    from market_timers.files import safefs

    out = {}
    directory = session_dir(state_dir, job, session)
    if directory.is_symlink() or not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        # status runs as root: a link planted by a job is never followed (safefs)
        record = safefs.read_json(path, base=state_dir, default=None)
        if isinstance(record, dict) and record.get("slot"):
            out[record["slot"]] = record
    return out


def read_slot(state_dir, job: str, key: str) -> dict | None:
    from market_timers.files import safefs

    record = safefs.read_json(record_path(os.fspath(state_dir), job, key), base=state_dir)
    return record if isinstance(record, dict) else None


def update_slot(state_dir, job: str, key: str, **fields) -> dict:
    """Merge fields into the slot's record (atomic rename: readers never see half a file)."""
    path = Path(record_path(os.fspath(state_dir), job, key))
    record = read_slot(state_dir, job, key) or {"job": job}
    record.update(fields)
    # NONE (no fsync), as ever: a slot record is a count for people (status, the digest, the
    # skip warning); what decides a start is the run ledger's claim, durable on its own, and
    # account() records again any slot a power cut left without its record.
    atomicfile.write(path, json.dumps(record, sort_keys=True) + "\n", mode=0o644,
                     sync=atomicfile.NONE, make_dirs=True)
    return record


def prune(state_dir, job: str, before: str) -> list[str]:
    """Delete the slot records of sessions dated before `before` (YYYY-MM-DD): a periodic job
    leaves hundreds of records per session. Returns the sessions removed."""
    root = Path(ledger.runs_dir(state_dir, job))
    gone = []
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        name = directory.name
        if directory.is_dir() and len(name) == 10 and name[4] == "-" and name < before:
            shutil.rmtree(directory, ignore_errors=True)
            gone.append(name)
    # The local run ledger's per-slot keys (ledger/<job>/<session>+<slot>/, ledger/local.py):
    # only periodic jobs have them, and nothing else ever deletes them.
    book = Path(ledger.job_ledger_dir(state_dir, job))
    for directory in sorted(book.iterdir()) if book.is_dir() and not book.is_symlink() else []:
        name = directory.name
        if "+" in name and name[:10] < before and directory.is_dir() \
                and not directory.is_symlink():
            shutil.rmtree(directory, ignore_errors=True)
    return gone
