"""The end record: how one invocation of a job unit ended, left by its record step for the alert
handler. Written and read here only.

`market-timers-run --record UNIT` (the ExecStopPost= of every unit render.py's job_units makes)
writes, as its last act, `<state_dir>/ends/<INVOCATION_ID>` (0600, in a 0700 directory of the
package's user): JSON holding the unit's name, systemd's SERVICE_RESULT, EXIT_CODE, EXIT_STATUS
and the unit's MARKET_* context. market-alert-ends.path starts market-alert-ends.service while the
directory is not empty; it reads each record, oldest first, alerts as OnFailure=/OnSuccess= would
have (alerts/runends.py) and removes it. This replaces two handler instances per job unit that
PID 1 loaded with every timer (issue 46). A record that does not read is moved into
`<state_dir>/ends.bad/`. `<state_dir>/ends.told/<unit>` (empty files) are the failed units
someone was told of: by the handler, or by the dead-man's sweep of failed units that left no
record (watch/endsweep.py). Stdlib and files/ only: the record step is the runner's.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from market_timers.files import atomicfile, regularfile

DIR = "ends"
BAD_DIR = "ends.bad"
TOLD_DIR = "ends.told"
MAX_BYTES = 64 << 10  # a record is well under 4 KiB: a larger file is not one
VALUE_MAX = 1024  # each MARKET_* value kept (the unit's Environment= holds no secret)
_INVOCATION = re.compile(r"[0-9a-f]{32}")
_UNIT = re.compile(r"market-[^/\s]+\.service")


class BadRecord(ValueError):
    """A file in ends/ that is not an end record (why: the message)."""


@dataclass(frozen=True)
class EndRecord:
    unit: str
    invocation: str
    result: str  # SERVICE_RESULT: success, exit-code, signal, timeout, watchdog...
    exit_code: str  # EXIT_CODE: exited, killed, dumped
    exit_status: str  # EXIT_STATUS: the number, or the signal's name
    context: dict = field(default_factory=dict)  # the unit's MARKET_* variables

    def monitor_env(self) -> dict[str, str]:
        """The MONITOR_* that systemd gives an OnFailure=/OnSuccess= handler."""
        return {"MONITOR_SERVICE_RESULT": self.result, "MONITOR_EXIT_CODE": self.exit_code,
                "MONITOR_EXIT_STATUS": self.exit_status, "MONITOR_INVOCATION_ID": self.invocation,
                "MONITOR_UNIT": self.unit}

    @property
    def succeeded(self) -> bool:
        return self.result == "success"


def directory(state_dir: str | os.PathLike) -> str:
    return os.path.join(os.fspath(state_dir), DIR)


def write(state_dir: str | os.PathLike, unit: str, env: dict) -> str | None:
    """The record of this invocation (env: the record step's, with INVOCATION_ID, SERVICE_RESULT,
    EXIT_CODE, EXIT_STATUS); its path, or None when there is no invocation id or unit name to
    name it by (not run by systemd). OSError: it could not be written."""
    invocation = env.get("INVOCATION_ID", "")
    if not _INVOCATION.fullmatch(invocation) or not _UNIT.fullmatch(unit or ""):
        return None
    doc = {"unit": unit, "invocation": invocation, "result": env.get("SERVICE_RESULT", ""),
           "exit_code": env.get("EXIT_CODE", ""), "exit_status": env.get("EXIT_STATUS", ""),
           "context": {k: v[:VALUE_MAX] for k, v in sorted(env.items())
                       if k.startswith("MARKET_")}}
    ends = directory(state_dir)
    try:
        os.mkdir(ends, 0o700)  # on demand (tmpfiles.d makes it too): the package's user's own
    except FileExistsError:
        pass
    path = os.path.join(ends, invocation)
    # Durable: a record lost in a crash is an alert never sent.
    atomicfile.write(path, json.dumps(doc, sort_keys=True), mode=0o600, sync=atomicfile.DURABLE)
    return path


def read(path: str | os.PathLike) -> EndRecord:
    """The record at path; BadRecord when it is a link, not a regular file, too large or not a
    record. Never follows a link, never blocks on a FIFO."""
    try:
        data, _ = regularfile.read(path, MAX_BYTES)
    except OSError as e:
        raise BadRecord(f"cannot be opened ({e.strerror}: a symlink?)") from None
    except ValueError as e:  # not a regular file, too large
        raise BadRecord(str(e)) from None
    return parse(data, os.path.basename(os.fspath(path)))


def parse(data: bytes, name: str) -> EndRecord:
    try:
        doc = json.loads(data)
    except ValueError:
        raise BadRecord("not JSON") from None
    if not isinstance(doc, dict):
        raise BadRecord("not a JSON object")
    texts = {k: doc.get(k) for k in ("unit", "invocation", "result", "exit_code", "exit_status")}
    if not all(isinstance(v, str) for v in texts.values()):
        raise BadRecord("a field is missing or not text")
    if not _UNIT.fullmatch(texts["unit"]):
        raise BadRecord(f"unit {texts['unit'][:80]!r} is not a market-timers job unit")
    if texts["invocation"] != name:
        raise BadRecord(f"its invocation {texts['invocation'][:40]!r} is not its name")
    context = doc.get("context", {})
    if not isinstance(context, dict) or not all(
            isinstance(k, str) and k.startswith("MARKET_") and isinstance(v, str)
            for k, v in context.items()):
        raise BadRecord("its context is not MARKET_* text values")
    return EndRecord(**texts, context=context)


def is_temp(name: str) -> bool:
    """A write in progress (atomicfile's temp name), or one a crash left behind."""
    return name.startswith(".") and name.endswith(".tmp")


def pending(state_dir: str | os.PathLike) -> list[tuple[float, str]]:
    """(mtime, name) of each file in ends/, oldest first; [] when there is no directory."""
    ends = directory(state_dir)
    try:
        names = os.listdir(ends)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        try:
            out.append((os.lstat(os.path.join(ends, name)).st_mtime, name))
        except FileNotFoundError:
            continue
    return sorted(out)


def mark_told(state_dir: str | os.PathLike, unit: str) -> None:
    """Someone was told that `unit` failed (its handler alerted, or the dead-man did)."""
    if not _UNIT.fullmatch(unit):
        return
    told_dir = os.path.join(os.fspath(state_dir), TOLD_DIR)
    try:
        os.mkdir(told_dir, 0o700)
    except FileExistsError:
        pass
    fd = os.open(os.path.join(told_dir, unit),
                 os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.utime(fd)  # the mark's time: a new failure of the same unit renews it
    finally:
        os.close(fd)


def told(state_dir: str | os.PathLike) -> dict[str, float]:
    """unit -> when someone was last told it failed."""
    told_dir = os.path.join(os.fspath(state_dir), TOLD_DIR)
    try:
        names = os.listdir(told_dir)
    except FileNotFoundError:
        return {}
    out = {}
    for name in names:
        try:
            out[name] = os.lstat(os.path.join(told_dir, name)).st_mtime
        except FileNotFoundError:
            continue
    return out


def forget_told(state_dir: str | os.PathLike, unit: str) -> None:
    try:
        os.unlink(os.path.join(os.fspath(state_dir), TOLD_DIR, unit))
    except FileNotFoundError:
        pass
