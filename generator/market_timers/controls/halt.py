"""`market-timers halt [--group G | --job J | --all] --reason TEXT`: the kill switch.

A halt (ledger/halts.py) is a record in <state_dir>/controls/ or a row of the cluster ledger, under
the rule of a pause (access.py); `halt` also stops the running services of the jobs it covers on
this host (`systemctl stop`: SIGTERM, then SIGKILL after the unit's TimeoutStopSec) and, when the
scope was not already halted, starts the config's `on_halt` once, as a transient unit
(systemd-run) of the jobs' user (`user`): like a job, it is the firm's own program, given no more
than an order job has (never root: the config is root's, but nothing in it runs as root). Its
environment says why: MARKET_HALT_REASON, MARKET_HALT_BY, MARKET_HALT_SCOPE, MARKET_HALT_HOST. It
is a job like the others (on_halt.py): its failure is a critical alert, and `halt` waits for its
end (bounded) and says it. The alert is halt_alerts.py's `announce`, which the command line
passes in; this module sends it once the halt's own work is done, before it waits for on_halt.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime

from market_timers.contracts import unitname
from market_timers.contracts.exitcodes import FAILURE, OK, USAGE
from market_timers.contracts.instants import iso
from market_timers.controls import on_halt
from market_timers.controls.access import checked_target, cluster_book, controls_directory
from market_timers.controls.operator import operator_name
from market_timers.files import atomicfile
from market_timers.ledger import DatabaseError, format_fields, halts


def halt(config, job: str | None, group: str | None, all_jobs: bool, reason: str, now: datetime,
         as_json: bool = False, systemctl=None, announce=None) -> int:
    """The kill switch. `announce(record, stopped, on_halt_unit)`: the command line's alert, made
    only by the halt that wrote the record (a halt of a scope already halted makes none)."""
    whole = None if job or group else ("all" if all_jobs else "orders")
    target = checked_target(config, job, group, "halt", whole)
    if isinstance(target, int):
        return target
    scope, name = target
    covered = [j.name for j in config.jobs
               if halts.covers(scope, name, j.name, j.lock, bool(getattr(j, "orders", False)))]
    if not covered:
        print(f"market-timers halt: {halts.describe(scope, name)} covers no job of "
              f"{config.source}: it would refuse nothing. Mark the jobs that send orders "
              f"with orders = true, or give one of: {', '.join(_covering_scopes(config))}",
              file=sys.stderr)
        return USAGE
    if not reason.strip():
        print("market-timers halt: --reason must say why (it is in the alert and the record)",
              file=sys.stderr)
        return USAGE
    fields = {"scope": scope, "name": name or None, "by": operator_name(), "since": iso(now),
              "host": os.uname().nodename, "reason": " ".join(reason.split())}
    problems = []
    written = _write_halt(config, scope, name, fields, problems)
    if isinstance(written, int):
        return written
    new, record = written
    if systemctl is None:
        from market_timers.host.systemctl import Systemctl

        systemctl = Systemctl()
    stopped = _stop_running(systemctl, covered, problems)
    on_halt_unit = _start_on_halt(config, systemctl, record, now, stopped, announce,
                                  problems) if new else None
    for problem in problems:
        print(f"market-timers halt: {problem}", file=sys.stderr)
    if not as_json:
        _tell(config, record, new, covered, stopped, on_halt_unit, problems)
    ended = _wait_on_halt(systemctl, on_halt_unit, record, now, announce, as_json)
    if as_json:
        print(json.dumps({"action": "halt", "scope": scope, "name": name or None, "new": new,
                          "by": record.get("by"), "since": record.get("since"),
                          "host": record.get("host"), "reason": record.get("reason"),
                          "jobs": covered, "stopped": stopped, "on_halt_unit": on_halt_unit,
                          "on_halt_result": on_halt.result_text(ended)}))
    return FAILURE if problems or (ended is not None and ended.ok is False) else OK


def _covering_scopes(config) -> list[str]:
    """The halt arguments that would cover a job of this config, widest first."""
    groups = sorted({j.lock for j in config.jobs if j.lock and j.lock != j.name})
    return ["--all", *(f"--group {g}" for g in groups), *(f"--job {j.name}" for j in config.jobs)]


def _write_halt(config, scope: str, name: str, fields: dict, problems: list):
    """The halt's record: in the cluster ledger (every node obeys), else, or when it cannot be
    reached, this host's own. (new: whether this halt wrote it, the record), or FAILURE."""
    new, record = None, None
    if getattr(config, "cluster", None) is not None:
        try:
            with cluster_book(config) as book:
                new = book.set_halt(scope, name or "", fields)  # True once in the cluster
                record = halts.cluster_record(book.halt_list(), scope, name)
        except DatabaseError as e:
            new = None
            problems.append(f"the cluster ledger cannot be reached ({e}): this halt holds on "
                            "this node only (its own record): halt every other node too")
    if new is None:
        try:
            path = os.path.join(controls_directory(config), halts.record_name(scope, name))
        except (ValueError, OSError) as e:
            print(f"market-timers halt: {e}", file=sys.stderr)
            return FAILURE
        new = atomicfile.create(path, format_fields(fields), mode=0o644)  # a second: False
        record = halts.read(str(config.state_dir), scope, name)
    record = record or dict(fields, what=halts.describe(scope, name),
                            resume=halts.resume_command(scope, name))
    return new, record


def _stop_running(systemctl, covered: list[str], problems: list) -> list[str]:
    """Stop this host's running services of the covered jobs: the units that stopped."""
    stopped = systemctl.running([unitname.job_services_glob(j) for j in covered])
    if stopped:
        systemctl.stop(stopped)  # SIGTERM, SIGKILL after each unit's TimeoutStopSec
        if still := systemctl.running(stopped):  # e.g. an operator whom systemd refuses
            problems.append(f"could not stop {', '.join(still)}: run `systemctl stop` on it as "
                            "root (its next starts are refused)")
            stopped = [u for u in stopped if u not in still]
    return stopped


def _start_on_halt(config, systemctl, record: dict, now: datetime, stopped: list[str],
                   announce, problems: list) -> str | None:
    """The config's `on_halt`, once, as a transient unit of the jobs' user: its name, or None.
    The halt's alert goes out here, before `halt` waits for on_halt: never delayed by it. An
    on_halt that could not be started is a critical alert of its own."""
    on_halt_unit, why_not = None, None
    if getattr(config, "on_halt", None):
        try:
            on_halt_unit = on_halt.start(config, systemctl, record, now)
        except (OSError, RuntimeError) as e:
            why_not = str(e)
            problems.append(f"on_halt could not be started: {why_not}")
    if announce is not None:
        announce(record, stopped, on_halt_unit)
        if why_not:
            _alert_on_halt(announce, record, now, f"could not be started: {why_not}")
        getattr(announce, "send", lambda: None)()
    return on_halt_unit


def _wait_on_halt(systemctl, unit: str | None, record: dict, now: datetime, announce,
                  as_json: bool):
    """on_halt's end (on_halt.wait), said; a failure systemd calls a success (a clean signal:
    no OnFailure=) is alerted here. None when no on_halt was started."""
    if unit is None:
        return None
    ended = on_halt.wait(systemctl, unit)
    if ended.unalerted:
        _alert_on_halt(announce, record, now, f"failed: {ended.how}")
    if not as_json:
        print(on_halt.told(unit, ended))
    return ended


def _alert_on_halt(announce, record: dict, now: datetime, what: str) -> None:
    """on_halt's own critical alert, when its unit's failure handler cannot raise it."""
    if announce is not None and hasattr(announce, "on_halt_failed"):
        announce.on_halt_failed(record, on_halt.session_of(record, now), what)


def _tell(config, record: dict, new: bool, covered: list[str], stopped: list[str],
          on_halt_unit: str | None, problems: list) -> None:
    """What the halt did, for the operator's terminal."""
    what = record["what"]
    print(f"halted {what}: every start of {', '.join(covered) or 'no job of the config yet'} is "
          f"refused (exit 178, recorded as halted), the operator's `market-timers run` too"
          if new else f"{what} was already halted by {record.get('by', '?')} since "
          f"{record.get('since', '?')} ({record.get('reason', '')}): that halt holds; on_halt is "
          "not run again, nor alerted")
    print(f"stopped: {', '.join(stopped)}" if stopped else
          "stopped: none" if problems else "stopped: none was running")
    if on_halt_unit:
        print(f"on_halt: started {on_halt_unit} ({' '.join(config.on_halt)}), waiting up to "
              f"{on_halt.WAIT_SEC:g} s for its end", flush=True)
    print(f"To lift it: {record['resume']}")
    if getattr(config, "cluster", None) is not None and not problems:
        print("every node: the halt is in the cluster ledger; each node's market-halt-watch "
              "stops the runs it covers there, and every node refuses their starts")
