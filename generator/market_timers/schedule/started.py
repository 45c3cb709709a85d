"""The (job, session)s that have already started, as the run ledger says: sync never gives them a
timer (the runner would refuse such a start with 173 anyway).
"""

from __future__ import annotations

import os
import sys

from market_timers import ledger
from market_timers.config.loader import Config
from market_timers.ledger import DatabaseError, runrecord
from market_timers.ledger.local import LocalLedger
from market_timers.ledger.localfiles import open_under
from market_timers.schedule import plan as planning


def already_started(config: Config, fires: list[planning.Fire]) -> dict[tuple[str, str], dict]:
    """(job, session) -> the ledger's attempt 1, for the session fires that have started.

    In cluster mode an unreachable ledger is not an error here: sync then reads this node's local
    ledger only (runs that fell back to it) and may install a timer for a (job, session) that ran
    on another node. That is safe: the runner claims every start in the cluster ledger before it
    execs the job (a second start exits 173). It is even the usual case: market-refresh.service
    runs sync with PrivateNetwork=yes and no DSN credential, so only an operator's `sync` (root,
    /etc/credstore) withdraws timers of sessions another node already ran."""
    try:
        book = ledger.for_config(config)
    except DatabaseError as e:
        book = _local_after(config, e)
    out = {}
    listed: dict[str, set[str] | None] = {}
    for f in fires:
        if f.is_daily:
            continue
        key = ledger.Key(f.job, f.session.isoformat())
        if isinstance(book, LocalLedger):  # a key nothing names is read no further
            if f.job not in listed:
                listed[f.job] = _names(config.state_dir, f.job)
            names = listed[f.job]
            if names is not None and key.name not in names:
                continue
        try:
            try:
                holder = book.holder(key)
            except DatabaseError as e:
                book = _local_after(config, e)
                holder = book.holder(key)
        except OSError as e:  # e.g. a symlink planted in the ledger: the runner decides then
            print(f"market-timers sync: warning: cannot read the run ledger of {f.job} "
                  f"{f.session}: {e}", file=sys.stderr)
            holder = None
        if holder is None:  # a run recorded before the ledger existed (the day of the upgrade)
            old = runrecord.read(config.state_dir, f.job, f.session.isoformat()) or {}
            if old.get("started_utc") and not old.get("refused"):
                holder = {**old, "host": old.get("host", "this host"), "attempt": 1,
                          "how": "timer"}
        if holder is not None:
            out[(f.job, f.session.isoformat())] = holder
    return out


def _local_after(config: Config, error: Exception):
    if getattr(config, "cluster", None) is not None:
        print(f"market-timers sync: note: the cluster run ledger cannot be reached ({error}); "
              "timers are kept for sessions another node may have run (its claim refuses a "
              "second start)", file=sys.stderr)
    return LocalLedger(os.fspath(config.state_dir))


def _names(state_dir, job: str) -> set[str] | None:
    """The session names the local ledger and the pre-ledger records hold for the job (None:
    cannot tell, so every key is read): two listings a job, not three opens a fire (0.3 s of an
    unchanged sync at 10,000 fires)."""
    names: set[str] = set()
    try:
        fd = open_under(os.fspath(state_dir), (job,), False)  # no symlink followed
        try:
            names.update(os.listdir(fd))
        finally:
            os.close(fd)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        runs = ledger.runs_dir(os.fspath(state_dir), job)  # legacy_record_path's directory
        names.update(n[:-5] for n in os.listdir(runs) if n.endswith(".json"))
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return names
