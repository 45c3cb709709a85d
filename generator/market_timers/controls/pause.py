"""`market-timers pause JOB|--group G [--until DATE] --note TEXT`, and the pauses in force.

A pause is a record in <state_dir>/controls/ or a row of the cluster ledger (access.py: who may
write it, and where).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import date, datetime

from market_timers.contracts.exitcodes import FAILURE, OK, USAGE
from market_timers.contracts.instants import iso
from market_timers.controls.access import checked_target, cluster_book, controls_directory
from market_timers.controls.operator import operator_name
from market_timers.files import atomicfile
from market_timers.ledger import DatabaseError, format_fields
from market_timers.ledger.pauses import (
    cluster_records,
    paused,
    record_name,
)


def pause(config, job: str | None, group: str | None, until: date | None, note: str,
          now: datetime, as_json: bool = False) -> int:
    target = checked_target(config, job, group, "pause")
    if isinstance(target, int):
        return target
    scope, name = target
    if not note.strip():
        print("market-timers pause: --note must say why (it is shown with every paused start)",
              file=sys.stderr)
        return USAGE
    fields = {"by": operator_name(), "since": iso(now), "host": os.uname().nodename,
              "note": " ".join(note.split()), "until": until.isoformat() if until else None}
    cluster = getattr(config, "cluster", None) is not None
    try:
        if cluster:  # every node reads it there (ledger/pauses.py)
            with cluster_book(config) as book:
                book.set_pause(scope, name, fields)
        else:
            path = os.path.join(controls_directory(config), record_name(scope, name))
            atomicfile.write(path, format_fields(fields), mode=0o644)
    except DatabaseError as e:
        print(f"market-timers pause: not paused: cannot record the pause in the cluster ledger "
              f"({e}); a pause must hold on every node, so nothing was changed", file=sys.stderr)
        return FAILURE
    except (ValueError, OSError) as e:
        print(f"market-timers pause: {e}", file=sys.stderr)
        return FAILURE
    if as_json:
        print(json.dumps({"action": "pause", "scope": scope, "name": name, **fields,
                          "cluster": cluster}))
        return OK
    what = f"lock group {name} (every job of it)" if scope == "group" else name
    where = " on every node (the cluster ledger)" if cluster else ""
    print(f"paused {what}{where}{f' until session {until}' if until else ''}: its timers' starts "
          f"are refused (exit 177, recorded as paused). To resume: market-timers resume "
          f"{'--group ' if scope == 'group' else ''}{name}")
    return OK


def current(config, book=None) -> list[dict]:
    """Every pause in force (status, digest): scope, by, since, until, note, resume. `book`: the
    cluster ledger, whose pauses count too (DatabaseError propagates)."""
    out = []
    cluster = cluster_records(book) if book is not None else None
    for job in getattr(config, "jobs", None) or []:
        held = paused(str(config.state_dir), job.name, job.lock, "0000-00-00", cluster=cluster)
        if held is not None and held not in out:
            out.append(held)
    return out
