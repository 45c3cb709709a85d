"""Run records: what the run ledger says about a (job, session), as one flat dict per key.

The ledger (ledger/) is the one source of truth for "did it run": the runner claims attempt 1 of a
(job, session) before it execs the job, notes the starts it refused (stale start, overlap skip,
already ran), and `market-timers-run --record` (ExecStopPost=) adds how each ended with systemd's
$SERVICE_RESULT / $EXIT_CODE / $EXIT_STATUS, so a record exists even when the job was killed.
`status`, the deadman and the digest read it through this module:

* a key with attempts: its latest attempt (result, exit_status, started_utc, finished_utc,
  duration_sec, host, pid, how...), with `attempts` (how many) and `refused_starts` (the kinds of
  the starts refused since, e.g. ["already-ran"]);
* a key with refused starts only: the latest one, with `refused` (its kind);
* nothing in the ledger: the record the runner wrote before the ledger existed
  (`<state_dir>/runs/<job>/<session>.json`, read only), else None: it never started.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from market_timers import ledger
from market_timers.files.safefs import listdir, read_bytes
from market_timers.ledger import DatabaseError, Key, for_config
from market_timers.ledger.local import LocalLedger


def legacy_path(state_dir: str | os.PathLike, job: str, session: str) -> Path:
    return Path(ledger.legacy_record_path(state_dir, job, session))


def summary(book, key: Key) -> dict | None:
    both = getattr(book, "attempts_and_refusals", None)  # the local ledger: one open
    attempts, refusals = both(key) if both else (book.attempts(key), book.refusals(key))
    base = {"job": key.job, "session": key.session}
    if attempts:
        return {**base, **attempts[-1], "attempts": len(attempts),
                "refused_starts": [r.get("refused", "?") for r in refusals]}
    if refusals:
        return {**base, **refusals[-1], "attempts": 0}
    return None


def read(state_dir: str | os.PathLike, job: str, session: str, book=None) -> dict | None:
    """The record of (job, session). `book`: the cluster ledger (cluster_book), read first: a
    run on any node; a DatabaseError from it is the caller's to handle. The local ledger still
    answers when the cluster has nothing: a run that fell back to it (on_db_unreachable = run)."""
    try:
        key = Key(job, session)
    except ValueError:
        return None
    if book is not None:
        found = summary(book, key)
        if found is not None:
            return found
    try:
        found = summary(LocalLedger(os.fspath(state_dir)), key)
    except OSError:  # a symlink planted in the ledger (never followed), an unreadable entry
        found = None
    return found if found is not None else _legacy(
        ledger.legacy_record_path(state_dir, job, session), state_dir)


def job_run_of(state_dir: str | os.PathLike, job: str, session: str, invocation: str,
               book=None) -> dict | None:
    """The attempt that systemd's `invocation` ran, with how it ended as the record step wrote it
    (runner/record.py: the runner's account over systemd's view); None when that invocation did
    not run the job (the runner refused it) or the ledger holds nothing of it. `book`: the
    cluster ledger first (its DatabaseError is the caller's)."""
    try:
        key = Key(job, session)
    except ValueError:
        return None
    books = [book] if book is not None else []
    for source in [*books, LocalLedger(os.fspath(state_dir))]:
        try:
            mine = [a for a in source.attempts(key) if invocation and
                    a.get("invocation") == invocation]
        except OSError:
            continue
        if mine:
            return None if mine[-1].get("refused") else mine[-1]
    return None


def cluster_book(config):
    """The cluster ledger (ledger.postgresql) for the readers in cluster mode, else None.
    Connects lazily: the first read raises DatabaseError when it cannot be reached."""
    if getattr(config, "cluster", None) is None:
        return None
    try:
        return for_config(config)
    except Exception as e:  # e.g. no DSN credential: every read fails the same way
        return _Broken(e if isinstance(e, DatabaseError) else DatabaseError(str(e)))


class _Broken:
    """A cluster ledger that could not be opened: each read raises the reason."""

    def __init__(self, error):
        self.error = error

    def close(self) -> None:
        pass

    def __getattr__(self, name):
        def fail(*args, **kw):
            raise self.error
        return fail


def _legacy(path: str | Path, state_dir) -> dict | None:
    """Root (deadman, status, sync) reads these: no symlink is followed (safefs). An lstat
    first: nearly every key has none, and safefs's walk from the state directory cost 1.3 s
    of a 3 s status page at 1,000 jobs (bench/RESULTS.md §9)."""
    try:
        os.lstat(path)
    except OSError:
        return None
    try:
        record = json.loads(read_bytes(Path(path), base=state_dir))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _names(directory: Path, state_dir) -> list[str]:
    try:
        return listdir(directory, base=state_dir)
    except OSError:  # missing, or a symlink or a file where a directory should be
        return []


def all_records(state_dir: str | os.PathLike, job: str | None = None) -> list[dict]:
    """Every readable record (of one job, or of all), oldest session first within a job."""
    book = LocalLedger(os.fspath(state_dir))
    out: dict[tuple[str, str], dict] = {}
    for key in book.keys(job):
        try:
            record = summary(book, key)
        except OSError:
            continue
        if record is not None:
            out[(key.job, key.name)] = record
    for record in legacy_records(state_dir, job):
        out.setdefault((record["job"], record["session"]), record)
    return [out[k] for k in sorted(out)]


def legacy_records(state_dir: str | os.PathLike, job: str | None = None) -> list[dict]:
    """The records the runner wrote before the ledger existed (of one job, or of all), by path;
    each with its session (the file's name) set when it had none. Read only: none is written."""
    root = Path(ledger.runs_dir(state_dir))
    jobs = [job] if job else _names(root, state_dir)
    paths = [root / j / n for j in jobs if "/" not in j and j not in (".", "..")
             for n in _names(root / j, state_dir) if n.endswith(".json")]
    out = []
    for path in sorted(paths):
        record = _legacy(path, state_dir)
        if record and record.get("job"):
            record.setdefault("session", path.stem)
            out.append(record)
    return out


RESULT_FIELDS = ("result", "exit_code", "exit_status", "finished_utc", "duration_sec")


def update(state_dir: str | os.PathLike, job: str, session: str, **fields) -> dict | None:
    """Record a run in the ledger the way the runner and --record would (tools and tests):
    `refused=KIND` notes a refused start; otherwise the start fields claim attempt 1 (if nobody
    has) and the result fields (result, exit_status...) finish the latest unfinished entry."""
    book = LocalLedger(os.fspath(state_dir))
    key = Key(job, session)
    if fields.get("refused"):
        book.refuse(key, fields)
    else:
        start = {k: v for k, v in fields.items() if k not in RESULT_FIELDS}
        if start and book.holder(key) is None:
            book.claim(key, "timer", start)
        done = {k: v for k, v in fields.items() if k in RESULT_FIELDS}
        if done:
            book.finish(key, start.get("invocation"), done)
    return read(state_dir, job, session)
