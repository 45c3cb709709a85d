"""Whether the dead-man's status page must be rebuilt (issue 46): a pass costs what is due.

Rebuilding the page reads every shown (job, session) (its record kept by recordcache.py) and
renders 17,000 cells at 1,000 jobs (about 0.4 s of CPU); a pass rebuilds it only when what it
shows may have changed, and
otherwise rewrites its two time stamps only (its health still names this pass). What it shows
changes when one of its inputs does, or when time alone moves a cell on:

* inputs: the metadata (mtime, size) of every file under the state and spool directories but the
  ledger's and the dead-man's own, the ledger's job and (job, session) directories from the page's
  first day on (an attempt, its result or a refused start is a file created in its key's
  directory, which changes that directory's mtime), a periodic job's slot records of those
  sessions (`runs/<job>/<session>/`: each is created or replaced by a rename in its session's
  directory) and the config as loaded;
* time: `until`, the first instant at which a cell would read otherwise with the same inputs (a
  scheduled fire's instant, every pass while a fire is due or a periodic session or a pending
  alert's age is shown, the next UTC midnight: the page's window and today's card).

In a cluster another node's run is a row of the shared ledger, not a file here: the page is then
rebuilt at every pass, as before. `<state_dir>/statuspage.json` keeps the key of the page written.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.contracts.instants import iso
from market_timers.files import atomicfile, safefs
from market_timers.watch import calendarends, recordcache

KEY_FILE = "statuspage.json"
LEDGER, RUNS = "ledger", "runs"
# Rewritten by every pass, or savings of what the page reads (recordcache.py, calendarends.py;
# the page shows no calendar warning): not the page's inputs.
OWN = frozenset({KEY_FILE, "deadman.json", recordcache.FILE, calendarends.FILE})


def inputs(config, first_day: str) -> str | None:
    """A digest of what the page reads; None when it cannot be known here (a cluster)."""
    if getattr(config, "cluster", None) is not None:
        return None
    digest = hashlib.blake2b(digest_size=16)
    raw = getattr(config, "raw", None)
    digest.update(json.dumps(raw, sort_keys=True, default=str).encode())
    state = os.fspath(config.state_dir)
    _tree(digest, state, skip=OWN | {LEDGER, RUNS})
    _ledger(digest, os.path.join(state, LEDGER), first_day)
    _runs(digest, os.path.join(state, RUNS), first_day)
    spool = getattr(config, "spool_dir", None)
    if spool is not None:
        _tree(digest, os.fspath(spool), skip=frozenset())
    return digest.hexdigest()


def _tree(digest, top: str, skip: frozenset) -> None:
    """Every entry's name, mtime and size under `top` (symlinks not followed)."""
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name in skip:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        digest.update(f"{entry.path}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
        if entry.is_dir(follow_symlinks=False):
            _tree(digest, entry.path, frozenset())


def _ledger(digest, ledger: str, first_day: str) -> None:
    """Each directory of the ledger, and each key directory of a session from `first_day` on
    (a periodic job's slot keys, `<session>+<slot>`, are left out: its cell counts its slot
    records, which _runs digests)."""
    try:
        jobs = sorted(os.scandir(ledger), key=lambda e: e.name)
    except OSError:
        return
    for job in jobs:
        if not job.is_dir(follow_symlinks=False):
            continue
        try:
            digest.update(f"{job.name}\0{job.stat(follow_symlinks=False).st_mtime_ns}\n".encode())
            keys = list(os.scandir(job.path))
        except OSError:
            continue
        for key in keys:
            if key.name >= first_day and "+" not in key.name:
                try:
                    mtime = key.stat(follow_symlinks=False).st_mtime_ns
                except OSError:
                    continue
                digest.update(f"{job.name}/{key.name}\0{mtime}\n".encode())


def _runs(digest, runs: str, first_day: str) -> None:
    """Each job's directory of slot records and pre-ledger records, and in it each session's
    (a slot record written or rewritten changes its session directory's mtime) and record from
    `first_day` on: one stat per (job, session), not per slot."""
    try:
        jobs = sorted(os.scandir(runs), key=lambda e: e.name)
    except OSError:
        return
    for job in jobs:
        try:
            if not job.is_dir(follow_symlinks=False):
                continue
            digest.update(f"{job.name}\0{job.stat(follow_symlinks=False).st_mtime_ns}\n".encode())
            entries = [e for e in os.scandir(job.path) if e.name >= first_day]
        except OSError:
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            digest.update(f"runs/{job.name}/{entry.name}\0{st.st_mtime_ns}\0{st.st_size}\n"
                          .encode())


def until(doc: dict, now: datetime) -> str:
    """The first instant at which time alone changes a cell of the page of `doc` (ISO)."""
    stamp = iso(now)
    times = [iso((now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0))]
    if (doc.get("outbox") or {}).get("oldest_pending_utc"):
        times.append(stamp)  # the oldest pending alert's age, in minutes
    for session in doc.get("sessions", []):
        for row in session.get("jobs", []):
            result = str(row.get("result") or "")
            fire = str(row.get("fire_utc") or "")
            if "slots" in row and not result.startswith(("done", "missed")):
                times.append(fire if fire > stamp else stamp)
            elif result == "due":
                times.append(stamp)  # missed at its deadline
            elif (result == "scheduled" or row.get("held")) and fire > stamp:
                times.append(fire)
    return min(times)


def load(state_dir: Path) -> dict:
    try:
        doc = json.loads(safefs.read_bytes(Path(state_dir) / KEY_FILE, base=state_dir))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def save(state_dir: Path, doc: dict) -> None:
    try:
        safefs.write_json(Path(state_dir) / KEY_FILE, doc, base=state_dir, sync=atomicfile.NONE)
    except OSError:  # the next pass rebuilds the page: the key is only a saving
        pass


def restamp(page: str, old: str, new: str) -> str:
    """The page with its header's time stamps (as of, last dead-man pass) moved to `new`."""
    head, sep, rest = page.partition('<p class="meta">')
    meta, end, tail = rest.partition("</p>")
    if not sep or not end:
        raise ValueError("no meta paragraph in the page")
    return head + sep + meta.replace(old, new) + end + tail
