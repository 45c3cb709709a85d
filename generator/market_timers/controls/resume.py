"""`market-timers resume [JOB | --group G | --orders | --all]`: ends a pause and a halt.

`resume --group G` also ends the group's failure pause (`pause_on_failure`): it stamps
controls/resumed-group-G, which the runner compares with the failure pause; as root it removes
the failure pause too.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime

from market_timers.contracts.exitcodes import FAILURE, OK
from market_timers.contracts.instants import iso
from market_timers.controls.access import checked_target, cluster_book, controls_directory
from market_timers.controls.operator import operator_name
from market_timers.files import atomicfile
from market_timers.ledger import DatabaseError, format_fields, halts
from market_timers.ledger.pauses import (
    cluster_records,
    failure_dir,
    paused,
    record_name,
)


def resume(config, job: str | None, group: str | None, now: datetime,
           as_json: bool = False, all_jobs: bool = False, announce=None) -> int:
    """`resume JOB|--group G` ends that scope's pause and halt; `resume [--orders]` the halt of
    the order jobs; `resume --all` the halt of every job. `announce(record)`: the command line's
    alert for each halt ended. In a cluster the pauses are the cluster ledger's (any node's)."""
    whole = None if job or group else ("all" if all_jobs else "orders")
    target = checked_target(config, job, group, "resume", whole)
    if isinstance(target, int):
        return target
    scope, name = target
    ended = []  # (JSON name, text)
    cluster = None
    halts_left = None  # the cluster's halts after this resume
    if getattr(config, "cluster", None) is not None:
        try:
            cluster, halts_left = _resume_cluster(config, scope, name, ended, announce)
        except DatabaseError as e:
            print(f"market-timers resume: cannot reach the cluster ledger ({e}): nothing was "
                  "resumed", file=sys.stderr)
            return FAILURE
    try:
        directory = controls_directory(config)
    except (ValueError, OSError) as e:
        if getattr(config, "cluster", None) is None:
            print(f"market-timers resume: {e}", file=sys.stderr)
            return FAILURE
        directory = None  # a cluster node whose own controls/ was never made: nothing in it
    if directory is not None:
        if scope in ("job", "group"):
            _resume_local(config, directory, scope, name, now, ended)
        _unhalt_local(config, directory, scope, name, ended, announce)
    still = paused(str(config.state_dir), name, config.job(name).lock, "0000-00-00",
                   cluster=cluster) if scope == "job" else None
    still_halted = _still_halted(config, scope, name, halts_left)
    if as_json:
        print(json.dumps({"action": "resume", "scope": scope, "name": name or None,
                          "ended": [key for key, _ in ended], "still_paused": still,
                          "still_halted": still_halted}))
        return OK
    _tell(scope, name, ended, still, still_halted)
    return OK


def _resume_cluster(config, scope: str, name: str, ended: list, announce):
    """The cluster's pauses and halts (every node's) of the scope ended: (the cluster's pauses,
    its halts) after this resume, for what still holds. DatabaseError: the ledger unreachable."""
    cluster = None
    with cluster_book(config) as book:
        if scope in ("job", "group"):
            if book.unpause(scope, name):
                ended.append(PAUSE_ENDED)
            if scope == "group" and book.unpause("failure", name):
                ended.append(FAILURE_PAUSE_ENDED)
            cluster = cluster_records(book)
        lifted = halts.cluster_record(book.halt_list(), scope, name)
        if book.unhalt(scope, name or ""):
            ended.append(("halt", f"the halt of {halts.describe(scope, name)}"))
            if lifted is not None and announce is not None:
                announce(lifted)
        return cluster, halts.cluster_records(book)


def _unhalt_local(config, directory: str, scope: str, name: str, ended: list,
                  announce) -> None:
    """This host's own halt record of the scope removed (announced unless the cluster's was)."""
    lifted = halts.read(str(config.state_dir), scope, name)
    try:
        os.unlink(os.path.join(directory, halts.record_name(scope, name)))
        if not any(key == "halt" for key, _ in ended):
            ended.append(("halt", f"the halt of {halts.describe(scope, name)}"))
            if lifted is not None and announce is not None:
                announce(lifted)
    except FileNotFoundError:
        pass


def _tell(scope: str, name: str, ended: list, still: dict | None,
          still_halted: list[dict]) -> None:
    """What the resume ended and what still holds, for the operator's terminal."""
    label = f"{'lock group ' if scope == 'group' else ''}{name}" if name else \
        halts.describe(scope)
    if not ended:
        print(f"{label} was not {'paused nor halted' if name else 'halted'}")
    else:
        print(f"resumed {label}: ended {' and '.join(text for _, text in ended)}"
              + (f"; still held: {still['scope']} is paused ({still['resume']})" if still
                 else ""))
    for held in still_halted:
        print(f"still halted: {held['what']} by {held.get('by', '?')} ({held.get('reason', '')})"
              f": to lift it: {held['resume']}")


PAUSE_ENDED = ("pause", "its pause")  # (JSON name, text) of what resume ended
FAILURE_PAUSE_ENDED = ("failure pause", "its pause after a failure (pause_on_failure)")


def _resume_local(config, directory: str, scope: str, name: str, now: datetime,
                  ended: list) -> None:
    """This host's own records (the only ones without a cluster): removed, or the failure pause
    stamped as resumed (an operator who is not root cannot delete the ledger's file)."""
    try:
        os.unlink(os.path.join(directory, record_name(scope, name)))
        if PAUSE_ENDED not in ended:
            ended.append(PAUSE_ENDED)
    except FileNotFoundError:
        pass
    failure = os.path.join(failure_dir(config.state_dir), name)
    if scope == "group" and os.path.exists(failure):
        if FAILURE_PAUSE_ENDED not in ended:
            ended.append(FAILURE_PAUSE_ENDED)
        atomicfile.write(os.path.join(directory, f"resumed-group-{name}"),
                         format_fields({"by": operator_name(), "since": iso(now)}), mode=0o644)
        if os.geteuid() == 0:
            os.unlink(failure)


def _still_halted(config, scope: str, name: str, cluster=None) -> list[dict]:
    """The halts still in force over the jobs of (scope, name) after a resume (`cluster`: the
    cluster ledger's, halts.cluster_records)."""
    jobs = [j for j in config.jobs
            if halts.covers(scope, name, j.name, j.lock, bool(getattr(j, "orders", False)))]
    out = []
    for held in halts.current(str(config.state_dir), cluster):
        if any(halts.covers(held["scope"], held["name"], j.name, j.lock,
                            bool(getattr(j, "orders", False))) for j in jobs):
            out.append(held)
    return out
