"""The config's `on_halt` (the firm's cancel-all), run once by the halt that wrote its record, as a
job like the others: a transient unit of the jobs' user (systemd-run) whose failure goes through
the jobs' own failure handler (OnFailure=market-alert-failure@<unit>, a critical alert), and
which `halt` waits for, up to WAIT_SEC, to say how it ended.

Its main process is `market-timers-run --supervise -- ON_HALT...` (runner/supervisor.py, the
jobs' supervisor), so that a death by SIGTERM, whenever it comes, fails the unit: exit 143.
Its unit carries MARKET_JOB=on_halt, MARKET_SEVERITY=critical and MARKET_SESSION=halt-<UTC
instant>-<scope>: the handler reads them from the unit's Environment= as it does a job's, so each halt's
on_halt is an incident of its own. RemainAfterExit=yes and no --collect keep the unit (active
or failed) until someone has read its result: the handler's `systemctl show`, then `halt`'s.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime
from typing import NamedTuple

from market_timers.config.loader import default_runner
from market_timers.contracts import environment, exitcodes, unitname

JOB = "on_halt"  # its name in its alerts (MARKET_JOB)
WAIT_SEC = 30.0  # how long `halt` waits for on_halt's end before it says "still running"
POLL_SEC = 0.25
PROPS = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus")
_KILLED = ("2", "3")  # ExecMainCode: CLD_KILLED, CLD_DUMPED (1: CLD_EXITED)


class Ended(NamedTuple):
    how: str  # "exit 0", "exit 3", "killed by signal 15 (TERM)", "running"
    ok: bool | None  # exit 0; None: still running
    unalerted: bool  # a failure systemd calls a success: no OnFailure= ran, halt alerts it


def session_of(record: dict, now: datetime) -> str:
    """The halt's own session id for on_halt's alerts, one per halt (its scope and instant, to
    the millisecond when it has one): `halt-<YYYYMMDDTHHMMSS[.mmm]Z>-<scope>[-<name>]`."""
    ms = f".{now.microsecond // 1000:03d}" if now.microsecond else ""
    return "-".join(x for x in (f"halt-{now:%Y%m%dT%H%M%S}{ms}Z", record.get("scope"),
                                record.get("name")) if x)


def start(config, systemctl, record: dict, now: datetime) -> str:
    """Start on_halt for the halt `record` made at `now`: the unit's name. Raises the systemctl's
    error (OSError, RuntimeError) when systemd-run refuses (a command that does not exist)."""
    unit = unitname.on_halt_unit(now, record["scope"], record.get("name") or "")
    # no job's own user: on_halt is no job (the package makes market-jobs)
    user = config.user or environment.DEFAULT_JOB_USER
    # the runner's supervisor as the main process: a death by SIGTERM (a stop, a kill after our
    # wait) is then exit 143, a failure its OnFailure= alerts, not a clean end of the unit
    supervised = [config.runner or default_runner(), "--supervise", "--", *config.on_halt]
    systemctl.run_transient(unit, supervised, user, {
        "MARKET_HALT_REASON": record.get("reason", ""),
        "MARKET_HALT_BY": record.get("by", ""), "MARKET_HALT_SCOPE": record["what"],
        "MARKET_HALT_HOST": record.get("host", ""),
        "MARKET_JOB": JOB, "MARKET_SESSION": session_of(record, now),
        "MARKET_SEVERITY": "critical",
    }, properties=["Type=exec", "RemainAfterExit=yes",
                   f"OnFailure=market-alert-failure@{unit}.service"])
    return unit


def wait(systemctl, unit: str, wait_sec: float | None = None) -> Ended:
    """How on_halt's unit ended, or Ended("running", None, False) after `wait_sec` (WAIT_SEC)."""
    deadline = time.monotonic() + (WAIT_SEC if wait_sec is None else wait_sec)
    while True:
        props = systemctl.show([unit], PROPS).get(unit, {})
        ended = ending(props)
        if ended is not None or time.monotonic() >= deadline:
            return ended or Ended("running", None, False)
        time.sleep(POLL_SEC)


def ending(props: dict) -> Ended | None:
    """How the unit ended, or None while it has not (queued, running). Only exit 0 is a success;
    a death by SIGTERM/INT/HUP/PIPE is not, though systemd calls it a clean end (no OnFailure=)."""
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if active != "failed" and not (active == "active" and sub == "exited"):
        return None
    code, status = props.get("ExecMainCode", ""), props.get("ExecMainStatus", "")
    if code in _KILLED:
        try:
            name = f" ({signal.Signals(int(status)).name.removeprefix('SIG')})"
        except ValueError:
            name = ""
        how = f"killed by signal {status}{name}"
    elif code == "1":
        how = exitcodes.supervised_signal(status) or f"exit {status}"
    else:  # it never ran (a failure to spawn it, a timeout): systemd's Result
        how = props.get("Result") or "did not run"
    ok = code == "1" and status == "0"
    return Ended(how, ok, not ok and active == "active")


def told(unit: str, ended: Ended) -> str:
    """`halt`'s line about on_halt."""
    if ended.ok is None:
        return (f"on_halt still running after {WAIT_SEC:g} s ({unit}): its failure will be "
                f"alerted; see `systemctl status {unit}`")
    if ended.ok:
        return f"on_halt ran: exit 0 ({unit})"
    alerted = ("systemd calls this signal a clean end, so halt raises the critical alert"
               if ended.unalerted else "its failure handler raises a critical alert")
    return f"on_halt failed: {ended.how} ({unit}; {alerted}; see `journalctl -u {unit}`)"


def result_text(ended: Ended | None) -> str | None:
    """`halt --json`'s on_halt_result: "ran: exit 0", "failed: exit 3", "running" (or null)."""
    if ended is None:
        return None
    if ended.ok is None:
        return "running"
    return f"{'ran' if ended.ok else 'failed'}: {ended.how}"
