"""The run records `status` and the status page show, each read again only when its key changed,
kept in `<state_dir>/status-records.json` (issue 46: reading 7,000 records, each its own
directory walk, was half of a `status --html` at 1,000 jobs).

Why a key directory's mtime tells: the ledger changes a key only by creating a name in its
directory (a claim and a refusal are exclusive creations, a result is renamed into place:
ledger/local.py), and that sets the directory's mtime (metrics/scan.py relies on the same). The
kernel stamps it with a coarse clock, so a key whose mtime is within MARGIN_NS of the read is not
kept (a second change in the same tick would leave it as it was). Not kept either: a record
from before the ledger (`runs/<job>/<session>.json`, whose key has no directory to stamp), and
anything in cluster mode (the records are the cluster ledger's: status.py reads those itself).

Written only by the state directory's owner (the dead-man, which rebuilds the page whenever a
record changed), read by anyone who may read it (root's `status`); records of sessions older
than the page's window are dropped. A missing, unreadable or corrupt file is ignored and written
again: it is only a saving.
"""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.files import atomicfile, safefs
from market_timers.ledger import paths, runrecord
from market_timers.ledger.localfiles import open_under

FILE = "status-records.json"
VERSION = 1
MARGIN_NS = 5 * 10**9
KEEP_DAYS = 8  # the page's window (statuspage.DAYS_BACK) and a day


class Records:
    """(job, session) -> the local run record, as runrecord.read gives it."""

    def __init__(self, state_dir, now: datetime):
        self.state_dir, self.now = Path(state_dir), now
        self.ledger = os.path.join(state_dir, paths.LEDGER_DIR)
        self.loaded: dict[str, list] | None = None  # the file, read at the first key found
        self.listed: dict[str, tuple[dict[str, int | None], set[str]] | None] = {}
        self.runs: set[str] | None = None  # the jobs with a runs/ directory
        self.learnt: dict[str, list] = {}
        self.started_ns = time.time_ns()

    def read(self, job: str, session: str) -> dict | None:
        listed = self._listed(job)
        if listed is not None and session not in listed[0] and session not in listed[1]:
            return None  # nothing of it here: most keys shown are fires still ahead
        # kept only for a key directory with no pre-ledger record beside it
        mtime = self._mtime(job, session) if listed and session not in listed[1] else None
        ident = f"{job}/{session}"
        kept = self.kept.get(ident) if mtime is not None else None
        if mtime is not None and kept is not None and kept[0] == mtime:
            return dict(kept[1])
        record = runrecord.read(self.state_dir, job, session)
        if mtime is not None and record is not None and self.started_ns - mtime > MARGIN_NS:
            self.learnt[ident] = self.kept[ident] = [mtime, record]
        return record

    @property
    def kept(self) -> dict[str, list]:
        if self.loaded is None:
            self.loaded = _load(self.state_dir)
        return self.loaded

    def keys(self, job: str) -> list[str]:
        """The names in the job's ledger directory (`<session>[+<slot>]`)."""
        listed = self._listed(job)
        return sorted(listed[0]) if listed is not None else []

    def _listed(self, job: str) -> tuple[set[str], set[str]] | None:
        """The names in the job's ledger directory, and the sessions with a pre-ledger record;
        None: cannot tell (each record is then read)."""
        if job not in self.listed:
            try:
                if self.runs is None:
                    self.runs = set(safefs.listdir(paths.runs_dir(self.state_dir),
                                                   base=self.state_dir))
                legacy = {n[:-5] for n in safefs.listdir(paths.runs_dir(self.state_dir, job),
                                                         base=self.state_dir)
                          if n.endswith(".json")} if job in self.runs else set()
                self.listed[job] = (_names(self.state_dir, job), legacy)
            except (OSError, ValueError):
                self.listed[job] = None
        return self.listed[job]

    def _mtime(self, job: str, session: str) -> int | None:
        """The key directory's mtime; None when it is not a directory (a planted symlink: the
        read refuses it). Its parents were opened without following symlinks by _names."""
        try:
            st = os.lstat(f"{self.ledger}/{job}/{session}")
        except OSError:
            return None
        return st.st_mtime_ns if stat.S_ISDIR(st.st_mode) else None

    def save(self) -> None:
        """The file, when anything was learnt and this user owns the state directory."""
        if not self.learnt:
            return
        try:
            if os.stat(self.state_dir).st_uid != os.geteuid():
                return
            first = (self.now - timedelta(days=KEEP_DAYS)).date().isoformat()
            keys = {k: v for k, v in self.kept.items() if k.partition("/")[2] >= first}
            text = json.dumps({"version": VERSION, "keys": keys}, separators=(",", ":"))
            safefs.write_atomic(self.state_dir / FILE, text, base=self.state_dir,
                                sync=atomicfile.NONE)
        except (OSError, ValueError):
            pass  # the next reader reads the records: a saving only


def _names(state_dir: Path, job: str) -> set[str]:
    try:  # the ledger's own walk: no symlink followed, no pathlib
        fd = open_under(os.fspath(state_dir), (job,), create=False)
    except FileNotFoundError:
        return set()
    try:  # names only: a job's ledger keeps every session's key, only those shown are stat'ed
        return set(os.listdir(fd))
    finally:
        os.close(fd)


def _load(state_dir: Path) -> dict[str, list]:
    try:
        doc = json.loads(safefs.read_bytes(state_dir / FILE, base=state_dir))
        if doc.get("version") != VERSION:
            return {}
        return {k: [v[0], v[1]] for k, v in doc["keys"].items()
                if isinstance(v, list) and len(v) == 2 and isinstance(v[0], int)
                and isinstance(v[1], dict)}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {}  # none yet, or corrupt: every record is read, and the file written again
