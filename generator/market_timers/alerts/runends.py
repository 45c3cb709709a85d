"""`market-timers alert-handler ends` (market-alert-ends.service, started by market-alert-ends.path
while `<state_dir>/ends/` is not empty): every end record the record step left (one per job unit
invocation, contracts/endrecord.py), oldest first, told by handler.handle exactly as the
OnFailure=/OnSuccess= instance of that unit would have told it, then removed.

Never exits non-zero for one record and never leaves a record behind on purpose: the path unit
starts this service again while the directory is not empty, and a service that keeps failing
would make the path unit hit its trigger limit and stop for good. A record that does not read is
moved into ends.bad/ and one critical alert names it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from market_timers.alerts import handler
from market_timers.alerts.api import raise_alert
from market_timers.contracts import endrecord, environment, unitname

log = logging.getLogger("market_timers.alerts")

# The record step runs before systemd decides about a restart: the unit is still stopping.
STOPPING = frozenset({"stop", "stop-sigterm", "stop-sigkill", "stop-watchdog", "stop-post",
                      "final-sigterm", "final-sigkill", "final-watchdog",
                      "dead-before-auto-restart", "failed-before-auto-restart"})
SETTLE_SEC = 10.0
POLL_SEC = 0.2
TEMP_GRACE_SEC = 60  # a temp file this old is no write in progress: a crash left it


def handle_all(config, env: dict | None = None, run: Callable[[list[str]], str] = handler._run,
               sleep=time.sleep, clock=time.monotonic, wall=time.time, now=None) -> int:
    """Every end record waiting, oldest first; the number handled (bad ones included)."""
    base = dict(os.environ if env is None else env)
    state_dir = config.state_dir
    ends = endrecord.directory(state_dir)
    done = 0
    for mtime, name in endrecord.pending(state_dir):
        path = os.path.join(ends, name)
        if endrecord.is_temp(name):
            if wall() - mtime < TEMP_GRACE_SEC:
                continue  # being written: renamed into a record in a moment
            set_aside(config, path, "a temporary file an interrupted write left", now)
            done += 1
            continue
        try:
            record = endrecord.read(path)
        except endrecord.BadRecord as e:
            set_aside(config, path, str(e), now)
            done += 1
            continue
        try:
            handle_one(config, record, base, run, sleep, clock, now)
            _remove(path)
        except Exception as e:  # the next records still get told; this one is set aside, loud
            log.exception("alert handler: the end of %s (%s) could not be told", record.unit,
                          record.invocation)
            set_aside(config, path, f"{type(e).__name__}: {e}", now,
                      what=f"could not be told: {record.unit}")
        done += 1
    return done


def handle_one(config, record: endrecord.EndRecord, base: dict, run, sleep, clock, now) -> None:
    """One record: handler.handle with the MONITOR_* systemd would have passed."""
    name = unitname.parse(record.unit)
    if record.succeeded:  # a daily unit failed yesterday: its mark must not hide a new failure
        endrecord.forget_told(config.state_dir, record.unit)
    if record.succeeded and name is not None and name.kind == unitname.TRY:
        return  # a try is no session's run: its success closes no real run's alerts
    if not record.succeeded:
        if record.context.get(environment.RETRIES, "0").strip("0"):
            state, current = settled(record.unit, run, sleep, clock)
            if current and current != record.invocation:
                log.info("%s: attempt %s failed; a later attempt (%s) has started: its own end "
                         "tells", record.unit, record.invocation, current)
                return
        endrecord.mark_told(config.state_dir, record.unit)
    handler.handle(config, "success" if record.succeeded else "failure", record.unit,
                   env={**base, **record.monitor_env()}, run=run, now=now)


def settled(unit: str, run, sleep, clock) -> tuple[str, str]:
    """(SubState, InvocationID) of the unit once it has left the stopping states, or after
    SETTLE_SEC: only then does it say whether systemd restarts it (retry_pending)."""
    deadline = clock() + SETTLE_SEC
    while True:
        out = run(["systemctl", "show", "--property=SubState", "--property=InvocationID",
                   "--", unit])
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        state = props.get("SubState", "")
        if state not in STOPPING or clock() >= deadline:
            return state, props.get("InvocationID", "")
        sleep(POLL_SEC)


def set_aside(config, path: str, why: str, now=None, what: str = "could not be read") -> None:
    """A file in ends/ that is no record, or one whose telling broke: into ends.bad/ (removed
    if it cannot be moved), and one critical alert naming it."""
    name = os.path.basename(path)
    bad_dir = os.path.join(os.fspath(config.state_dir), endrecord.BAD_DIR)
    aside = os.path.join(bad_dir, f"{name}.{int(time.time())}")
    try:
        os.makedirs(bad_dir, mode=0o700, exist_ok=True)
        os.rename(path, aside)
    except OSError as e:
        log.error("alert handler: cannot move %s to %s (%s): removed", path, bad_dir, e)
        aside = "(removed: it could not be moved)"
        _remove(path)
    log.error("alert handler: %s %s (%s); moved to %s", path, what, why, aside)
    raise_alert(config, kind="end-record-bad", severity="critical",
                key=f"end-record-bad:{name}",
                title=f"a job's run ending {what} ({path}: {why})",
                text=f"{path} {what} ({why}); it is now {aside}. The run it "
                     "stood for was not alerted: check `systemctl list-units --failed "
                     "'market-*'` and the run ledger (`market-timers status`).",
                now=now)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    except OSError as e:  # the dead-man reports a record that stays (alert handler stuck)
        log.error("alert handler: cannot remove %s: %s", path, e)
