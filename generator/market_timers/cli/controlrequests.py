"""An operator's halt, pause and resume through root's market-controls.service (issue 41), both
ends: the command line of a member of operator_group writes the request and prints the answer;
`market-timers take-requests` (the service, root) runs each request as root's command would.
(Rather than a polkit rule: the halt's alert and records also need root, not only the stop.)
The request's format and checks: controls/requests.py.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout

from market_timers.cli.commandcontext import UsageError
from market_timers.contracts.exitcodes import FAILURE, USAGE
from market_timers.controls import requests
from market_timers.schema.problems import ConfigError

WAIT_SEC = 150.0  # the stops (each unit's TimeoutStopSec) and on_halt's wait (30 s), with room
YOUNG_SEC = 5.0  # a request still being written (its .tmp) is waited for this long


def by_request(args, command: str, root: str = requests.REQUESTS_DIR) -> int | None:
    """Not root, on a host that takes requests, with its config: ask root's service and print
    its answer (the exit status root's command had). None: run the command here."""
    from market_timers.config.loader import config_path
    from market_timers.contracts.environment import DEFAULT_CONFIG

    if os.geteuid() == 0 or not requests.served(root) or \
            str(config_path(getattr(args, "config", None))) != DEFAULT_CONFIG:
        return None
    if getattr(args, "now", None):
        raise UsageError("--now: an operator's request runs at root's clock, not a given one")
    fields = {k: _plain(getattr(args, k, None)) for k in requests.FIELDS[command]}
    try:
        rid = requests.send(command, fields, root)
    except PermissionError:
        print(f"market-timers {command}: only root or a member of the operator group may pause, "
              f"halt or resume ({requests.inbox(root)}: permission denied)", file=sys.stderr)
        return FAILURE
    got = requests.wait_answer(rid, WAIT_SEC, root)
    if isinstance(got, dict):
        sys.stdout.write(str(got.get("stdout", "")))
        sys.stderr.write(str(got.get("stderr", "")))
        return int(got.get("status", FAILURE))
    print(f"market-timers {command}: " + (
        f"root took the request but did not answer within {WAIT_SEC:g} s: see `journalctl -u "
        "market-controls.service`" if got else
        f"no answer within {WAIT_SEC:g} s and nothing was done (the request is withdrawn): is "
        "market-controls.path active? (`systemctl status market-controls.path`)"),
        file=sys.stderr)
    return FAILURE


def _plain(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def cmd_take_requests(args, root: str = requests.REQUESTS_DIR) -> int:
    """Every request in in/, taken, run and answered, until it stays empty (the path unit
    starts this again when a request lands)."""
    from market_timers.cli.commandcontext import config_of

    if not requests.served(root):  # no operator_group: sync made no in/, nothing to take
        print(f"market-timers take-requests: no {requests.inbox(root)}: no requests to take "
              "(the config has no operator_group)", file=sys.stderr)
        return 0
    try:
        group, broken = config_of(args, check_calendars=False).operator_group or "", None
    except ConfigError as e:
        group, broken = "", "\n".join(e.problems.lines())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        waiting = False
        for name in sorted(os.listdir(requests.inbox(root))):
            path = os.path.join(requests.inbox(root), name)
            if name.startswith(".") and name.endswith(".tmp") and _age(path) < YOUNG_SEC:
                waiting = True  # still being written: renamed in a moment
                continue
            _take(args, path, group, broken, root)
        if not waiting:
            break
        time.sleep(0.1)
    requests.clean_answers(root)
    return 0


def _age(path: str) -> float:
    try:
        return time.time() - os.lstat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def _take(args, path: str, group: str, broken: str | None, root: str) -> None:
    """One request: refused (logged, removed, answered to a member), or run as root."""
    try:
        request = requests.read(path, group)
    except (requests.Refused, OSError) as e:
        print(f"market-timers take-requests: refused {path}: {e}", file=sys.stderr)
        _remove(path)
        if getattr(e, "answer_to", None):
            requests.answer(*e.answer_to, USAGE, "", f"market-timers: the request was refused: "
                            f"{e}\n", root)
        return
    _remove(path)  # taken: run at most once, whatever happens next
    if broken:
        status, out, err = USAGE, "", f"{broken}\nmarket-timers: the config is broken; " \
                                      "nothing was changed\n"
    else:
        print(f"market-timers take-requests: {request.command} for {request.user} "
              f"(uid {request.uid}): {request.fields}", file=sys.stderr)
        status, out, err = _run(args, request)
    requests.answer(request.id, request.uid, status, out, err, root)


def _remove(path: str) -> None:
    import shutil

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _run(args, request: requests.Request) -> tuple[int, str, str]:
    """Root's command for the request: (exit status, stdout, stderr)."""
    from market_timers.cli.operatorcommands import cmd_halt, cmd_pause, cmd_resume

    command = {"halt": cmd_halt, "pause": cmd_pause, "resume": cmd_resume}[request.command]
    fields = {"job": None, "group": None, "all_jobs": False, **request.fields}
    ns = argparse.Namespace(command=request.command, config=getattr(args, "config", None),
                            now=None, **fields)
    os.environ["SUDO_USER"] = request.user  # operator_name(): the records' and alerts' "by"
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = command(ns)
    except ConfigError as e:
        err.write("\n".join(e.problems.lines()) + "\n")
        status = USAGE
    except UsageError as e:
        err.write(f"market-timers {request.command}: {e}\n")
        status = USAGE
    except Exception:  # noqa: BLE001 - the operator is answered, the journal has the trace
        traceback.print_exc()
        err.write(f"market-timers {request.command}: failed as root: see `journalctl -u "
                  "market-controls.service`\n")
        status = FAILURE
    return status, out.getvalue(), err.getvalue()
