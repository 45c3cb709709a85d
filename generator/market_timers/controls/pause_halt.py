"""`market-timers pause JOB|--group G [--until DATE] --note TEXT`, `halt [--group G | --job J |
--all] --reason TEXT` (the kill switch) and `resume [JOB | --group G | --orders | --all]`.

A pause is a record in <state_dir>/controls/ (ledger/pauses.py names the files and reads them for
the runner), or in a cluster a row of the cluster ledger, which every node reads: root's directory, 0755, or root:<operator_group> 2775 when the config names an
`operator_group`, so that its members pause and resume without root. Only root and members of
that group may run these commands; a job (its own user, in neither) cannot write the directory.

`resume --group G` also ends the group's failure pause (`pause_on_failure`): it stamps
controls/resumed-group-G, which the runner compares with the failure pause; as root it removes
the failure pause too.

A halt (ledger/halts.py) is a record in the same directory, under the same rule; `halt` also stops
the running services of the jobs it covers on this host (`systemctl stop`: SIGTERM, then SIGKILL
after the unit's TimeoutStopSec) and, when the scope was not already halted, starts the config's
`on_halt` once, as a transient unit (systemd-run) of the jobs' user (`user`): like a job, it is
the firm's own program, given no more than an order job has (never root: the config is root's,
but nothing in it runs as root). Its environment says why: MARKET_HALT_REASON, MARKET_HALT_BY,
MARKET_HALT_SCOPE, MARKET_HALT_HOST. The alert is halt_alerts.py's `announce`, which the command
line passes in and sends once this module's work is done; this module sends none.
"""

from __future__ import annotations

import grp
import json
import os
import sys
from datetime import date, datetime

from market_timers.contracts import unitname
from market_timers.contracts.exitcodes import FAILURE, OK, USAGE
from market_timers.contracts.instants import iso
from market_timers.controls.operator import operator_name
from market_timers.files import atomicfile
from market_timers.ledger import DatabaseError, format_fields, halts
from market_timers.ledger.pauses import (
    cluster_records,
    controls_dir,
    failure_dir,
    paused,
    record_name,
)


def _allowed(config) -> str | None:
    """None when this user may pause, else why not."""
    if os.geteuid() == 0:
        return None
    group = getattr(config, "operator_group", "") or ""
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            return f"the operator_group {group!r} of {config.source} is no group on this host"
        if gid in os.getgroups():
            return None
        return (f"only root or a member of the operator group {group!r} may pause, halt or "
                "resume")
    return ("only root may pause, halt or resume (set operator_group in the config to let a "
            "group of operators do it)")


def _target(config, job: str | None, group: str | None) -> tuple[str, str]:
    """("job", name) or ("group", name), checked against the config (ValueError: why not)."""
    if job:
        if job not in {j.name for j in config.jobs}:
            raise ValueError(config.unknown_job(job))
        return "job", job
    groups = sorted({j.lock for j in config.jobs})
    if group not in groups:
        raise ValueError(f"no lock group {group!r} in {config.source} (its groups: "
                         f"{', '.join(groups) or 'none'})")
    return "group", group


def _checked_target(config, job: str | None, group: str | None, command: str,
                    whole: str | None = None):
    """What pause, halt and resume check first: the caller may write controls/ (else exit 1),
    and the job or group exists (else exit 2, naming it); the (scope, name) or the exit code.
    `whole` ("orders", "all"): a halt's scope that names no job nor group."""
    why = _allowed(config)
    if why:
        print(f"market-timers {command}: {why}", file=sys.stderr)
        return FAILURE
    if whole:
        return whole, ""
    try:
        return _target(config, job, group)
    except ValueError as e:
        print(f"market-timers {command}: {e}", file=sys.stderr)
        return USAGE


def _directory(config) -> str:
    """controls/, made as root's (with the operator group's write) when missing."""
    path = controls_dir(config.state_dir)
    if not os.path.isdir(path) and os.geteuid() != 0:
        raise ValueError(f"{path} does not exist yet: root makes it (the first `market-timers "
                         "pause` as root)")
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o755, exist_ok=True)
    if os.geteuid() == 0:
        group = getattr(config, "operator_group", "") or ""
        try:
            gid = grp.getgrnam(group).gr_gid if group else 0
        except KeyError:
            raise ValueError(f"the operator_group {group!r} of {config.source} is no group on "
                             "this host (groupadd it first)") from None
        os.chown(path, 0, gid, follow_symlinks=False)
        os.chmod(path, 0o2775 if group else 0o755)
    return path


def pause(config, job: str | None, group: str | None, until: date | None, note: str,
          now: datetime, as_json: bool = False) -> int:
    target = _checked_target(config, job, group, "pause")
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
            with _cluster_book(config) as book:
                book.set_pause(scope, name, fields)
        else:
            path = os.path.join(_directory(config), record_name(scope, name))
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


class _cluster_book:
    """The cluster ledger for the operator's command (the DSN credential, as root), closed after
    (DatabaseError, Unreachable included, when it cannot be read or reached)."""

    def __init__(self, config):
        from market_timers.ledger import for_config

        self.book = for_config(config)

    def __enter__(self):
        return self.book

    def __exit__(self, *exc) -> None:
        self.book.close()


def halt(config, job: str | None, group: str | None, all_jobs: bool, reason: str, now: datetime,
         as_json: bool = False, systemctl=None, announce=None) -> int:
    """The kill switch. `announce(record, stopped, on_halt_unit)`: the command line's alert, made
    only by the halt that wrote the record (a halt of a scope already halted makes none)."""
    whole = None if job or group else ("all" if all_jobs else "orders")
    target = _checked_target(config, job, group, "halt", whole)
    if isinstance(target, int):
        return target
    scope, name = target
    if not reason.strip():
        print("market-timers halt: --reason must say why (it is in the alert and the record)",
              file=sys.stderr)
        return USAGE
    fields = {"scope": scope, "name": name or None, "by": operator_name(), "since": iso(now),
              "host": os.uname().nodename, "reason": " ".join(reason.split())}
    problems = []
    new, record = None, None
    if getattr(config, "cluster", None) is not None:  # the cluster ledger: every node obeys
        try:
            with _cluster_book(config) as book:
                new = book.set_halt(scope, name or "", fields)  # True once in the cluster
                record = halts.cluster_record(book.halt_list(), scope, name)
        except DatabaseError as e:
            new = None
            problems.append(f"the cluster ledger cannot be reached ({e}): this halt holds on "
                            "this node only (its own record): halt every other node too")
    if new is None:  # no cluster, or its ledger unreachable: this host's own record
        try:
            path = os.path.join(_directory(config), halts.record_name(scope, name))
        except (ValueError, OSError) as e:
            print(f"market-timers halt: {e}", file=sys.stderr)
            return FAILURE
        new = atomicfile.create(path, format_fields(fields), mode=0o644)  # a second: False
        record = halts.read(str(config.state_dir), scope, name)
    record = record or dict(fields, what=halts.describe(scope, name),
                            resume=halts.resume_command(scope, name))
    covered = [j.name for j in config.jobs
               if halts.covers(scope, name, j.name, j.lock, bool(getattr(j, "orders", False)))]
    if systemctl is None:
        from market_timers.host.systemctl import Systemctl

        systemctl = Systemctl()
    stopped = systemctl.running([unitname.job_services_glob(j) for j in covered])
    if stopped:
        systemctl.stop(stopped)  # SIGTERM, SIGKILL after each unit's TimeoutStopSec
        if still := systemctl.running(stopped):  # e.g. an operator whom systemd refuses
            problems.append(f"could not stop {', '.join(still)}: run `systemctl stop` on it as "
                            "root (its next starts are refused)")
            stopped = [u for u in stopped if u not in still]
    on_halt_unit = None
    if new and getattr(config, "on_halt", None):
        on_halt_unit = unitname.on_halt_unit(now)
        try:
            systemctl.run_transient(on_halt_unit, list(config.on_halt), config.user, {
                "MARKET_HALT_REASON": record.get("reason", ""),
                "MARKET_HALT_BY": record.get("by", ""), "MARKET_HALT_SCOPE": record["what"],
                "MARKET_HALT_HOST": record.get("host", "")})
        except (OSError, RuntimeError) as e:
            problems.append(f"on_halt could not be started: {e}")
            on_halt_unit = None
    if new and announce is not None:
        announce(record, stopped, on_halt_unit)
    for problem in problems:
        print(f"market-timers halt: {problem}", file=sys.stderr)
    if as_json:
        print(json.dumps({"action": "halt", "scope": scope, "name": name or None, "new": new,
                          "by": record.get("by"), "since": record.get("since"),
                          "host": record.get("host"), "reason": record.get("reason"),
                          "jobs": covered, "stopped": stopped, "on_halt_unit": on_halt_unit}))
        return FAILURE if problems else OK
    what = record["what"]
    print(f"halted {what}: every start of {', '.join(covered) or 'no job of the config yet'} is "
          f"refused (exit 178, recorded as halted), the operator's `market-timers run` too"
          if new else f"{what} was already halted by {record.get('by', '?')} since "
          f"{record.get('since', '?')} ({record.get('reason', '')}): that halt holds; on_halt is "
          "not run again, nor alerted")
    print(f"stopped: {', '.join(stopped)}" if stopped else
          "stopped: none" if problems else "stopped: none was running")
    if on_halt_unit:
        print(f"on_halt started once: {on_halt_unit} ({' '.join(config.on_halt)})")
    print(f"To lift it: {record['resume']}")
    if getattr(config, "cluster", None) is not None and not problems:
        print("every node: the halt is in the cluster ledger; each node's market-halt-watch "
              "stops the runs it covers there, and every node refuses their starts")
    return FAILURE if problems else OK


def resume(config, job: str | None, group: str | None, now: datetime,
           as_json: bool = False, all_jobs: bool = False, announce=None) -> int:
    """`resume JOB|--group G` ends that scope's pause and halt; `resume [--orders]` the halt of
    the order jobs; `resume --all` the halt of every job. `announce(record)`: the command line's
    alert for each halt ended. In a cluster the pauses are the cluster ledger's (any node's)."""
    whole = None if job or group else ("all" if all_jobs else "orders")
    target = _checked_target(config, job, group, "resume", whole)
    if isinstance(target, int):
        return target
    scope, name = target
    ended = []  # (JSON name, text)
    cluster = None
    halts_left = None  # the cluster's halts after this resume
    if getattr(config, "cluster", None) is not None:
        try:  # the cluster's pauses and halts (every node's)
            with _cluster_book(config) as book:
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
                halts_left = halts.cluster_records(book)
        except DatabaseError as e:
            print(f"market-timers resume: cannot reach the cluster ledger ({e}): nothing was "
                  "resumed", file=sys.stderr)
            return FAILURE
    try:
        directory = _directory(config)
    except (ValueError, OSError) as e:
        if getattr(config, "cluster", None) is None:
            print(f"market-timers resume: {e}", file=sys.stderr)
            return FAILURE
        directory = None  # a cluster node whose own controls/ was never made: nothing in it
    if directory is not None:
        if scope in ("job", "group"):
            _resume_local(config, directory, scope, name, now, ended)
        lifted = halts.read(str(config.state_dir), scope, name)
        try:
            os.unlink(os.path.join(directory, halts.record_name(scope, name)))
            if not any(key == "halt" for key, _ in ended):
                ended.append(("halt", f"the halt of {halts.describe(scope, name)}"))
                if lifted is not None and announce is not None:
                    announce(lifted)
        except FileNotFoundError:
            pass
    still = paused(str(config.state_dir), name, config.job(name).lock, "0000-00-00",
                   cluster=cluster) if scope == "job" else None
    still_halted = _still_halted(config, scope, name, halts_left)
    label = f"{'lock group ' if scope == 'group' else ''}{name}" if name else \
        halts.describe(scope)
    if as_json:
        print(json.dumps({"action": "resume", "scope": scope, "name": name or None,
                          "ended": [key for key, _ in ended], "still_paused": still,
                          "still_halted": still_halted}))
        return OK
    if not ended:
        print(f"{label} was not {'paused nor halted' if name else 'halted'}")
    else:
        print(f"resumed {label}: ended {' and '.join(text for _, text in ended)}"
              + (f"; still held: {still['scope']} is paused ({still['resume']})" if still
                 else ""))
    for held in still_halted:
        print(f"still halted: {held['what']} by {held.get('by', '?')} ({held.get('reason', '')})"
              f": to lift it: {held['resume']}")
    return OK


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
