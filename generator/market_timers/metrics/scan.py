"""The run ledger as the metrics read it: only the key directories that changed since the previous
scan, plus what the others contributed, kept in `<state_dir>/metrics/scan.json`.

Why: the textfile is rewritten after every run and every dead-man pass (once a minute), and the
ledger keeps every daily job's key for ever (2,016 a year for eight jobs) and a periodic job's
for retention_days; reading every directory at every update grew with them without bound
(bench/metrics_scale.py: full read against incremental).

Why a directory's mtime tells what changed: the ledger changes a key's directory only by creating
a name in it (a claim and a refusal are exclusive creations, a result is renamed into place:
ledger/local.py), and creating a name sets the directory's mtime. The one write that creates no
name, a claim's fields written just after its creation, belongs to an entry that has no result
yet: a key with such an entry ("open"), with no entry at all, or that could not be read, is re-read
by every scan until that changes. Any other key is re-read when its directory's mtime is at or
after the previous scan's start less MARGIN_NS (the kernel stamps with a coarse clock), so every
change is read by a scan that starts after it, and the history (state.py) counts it then.

A full scan (every directory) when scan.json is missing, unreadable or of another version, when the
clock reads earlier than the previous scan's start (a clock stepped back could stamp a change
before it), and once every FULL_EVERY_NS whatever happened: what an incremental scan could miss is
counted late, never lost, and never twice (the history counts each run once, by its key).

Scans run under the metrics lock (State.lock), one at a time; save() is called after the history
holds what the scan read, so a writer that dies in between only makes the next scan read more.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from market_timers.ledger import runrecord
from market_timers.ledger.local import LocalLedger
from market_timers.metrics.records import is_finished

NAME = "scan.json"
VERSION = 1
MARGIN_NS = 5 * 10**9
FULL_EVERY_NS = 24 * 3600 * 10**9


@dataclass
class LedgerView:
    """What the metrics need from the ledger after one scan."""

    records: list[dict]  # every start in the key directories read now (+ legacy ones if full)
    ran: set[tuple[str, str]]  # (job, session) of every key with at least one start
    last: dict[str, dict]  # job -> its start with the latest started_utc, wherever read
    full: bool  # every directory was read
    _saved: dict = field(default_factory=dict, repr=False)  # what save() writes


def read(state) -> LedgerView:
    """Scan the ledger under `state` (a metrics.State): see the module's docstring."""
    started = time.time_ns()
    saved = _load(state, started)
    full = saved is None
    since = 0 if full else saved["started_ns"] - MARGIN_NS
    again = set() if full else set(saved["again"])
    book = LocalLedger(os.fspath(state.state_dir))
    records: list[dict] = []
    ran: set[tuple[str, str]] = set()
    listed: set[tuple[str, str]] = set()
    keep: list[str] = []  # re-read by the next scan whatever its mtime
    for key, mtime in book.key_times():
        ident = f"{key.job}/{key.name}"
        listed.add((key.job, key.session))
        if not (full or mtime >= since or ident in again):
            ran.add((key.job, key.session))  # read before, with a start in it (else in `again`)
            continue
        try:
            entries = book.attempts(key) + book.refusals(key)
        except OSError:  # a symlink planted in the ledger (never followed), an unreadable entry
            keep.append(ident)
            continue
        entries = [{**e, "job": key.job, "session": key.session} for e in entries]
        records += entries
        if entries:
            ran.add((key.job, key.session))
        if not entries or not all(is_finished(e) for e in entries):
            keep.append(ident)
    # The records of runs from before the ledger never change (nothing writes them): counted by
    # a full scan, they are only sessions that ran to the others.
    legacy = [r for r in runrecord.legacy_records(state.state_dir)
              if (r["job"], r["session"]) not in listed]
    ran |= {(r["job"], r["session"]) for r in legacy}
    if full:
        records += legacy
    # A start read again (it ended since, or its claim's fields came) keeps its started_utc and
    # comes after the kept one: it replaces it.
    last = {} if full else dict(saved["last"])
    for rec in records:
        when = rec.get("started_utc") or ""
        if rec["job"] not in last or when >= (last[rec["job"]].get("started_utc") or ""):
            last[rec["job"]] = rec
    return LedgerView(records, ran, last, full, {
        "version": VERSION, "started_ns": started,
        "full_ns": started if full else saved["full_ns"], "again": sorted(keep), "last": last})


def save(state, view: LedgerView) -> None:
    """Keep what the next scan needs; after the history holds what this one read."""
    state.write(NAME, view._saved)


def _load(state, now_ns: int) -> dict | None:
    """The previous scan's note, or None: read everything."""
    doc = state.read(NAME)
    try:
        ok = (doc.get("version") == VERSION
              and isinstance(doc["started_ns"], int) and isinstance(doc["full_ns"], int)
              and doc["full_ns"] <= doc["started_ns"] <= now_ns
              and now_ns - doc["full_ns"] < FULL_EVERY_NS
              and all(isinstance(k, str) for k in doc["again"])
              and all(isinstance(j, str) and isinstance(r, dict)
                      for j, r in doc["last"].items()))
    except (KeyError, TypeError, AttributeError):
        ok = False
    return doc if ok else None
