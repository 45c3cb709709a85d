"""The event spool: one small JSON file per event, written durably by any process of the host.

Directories (the package's tmpfiles.d, 3770 market-timers:market-timers-spool, setgid and sticky):
`<spool_dir>/events` (default /var/spool/market-timers/events: survives a reboot) and, when that
write fails (a full or read-only /var), `<runtime_dir>/events` (/run/market-timers/events, a tmpfs:
best effort, lost at reboot). The package's user and the spool group's members may write there; the
setgid bit gives every file the group, and each file is made 0640 whatever the caller's umask, so
the processor (user market-timers) can read it and, the directory being group-writable, remove it.

A write is atomicfile.write, DURABLE: a dot-named temp file (O_EXCL, O_NOFOLLOW), fsync, rename to
`<ns>-<pid>-<rand>.json` (names sort in arrival order), fsync of the directory. A failure removes
the temp file: never a partial event. No lock is taken, so a caller is never blocked by the processor.

Import-light on purpose (jobnotify calls it from jobs and gateways): os and time only (atomicfile
and flatjson import nothing more); the JSON is written by hand (`dumps`).
"""

from __future__ import annotations

import os
import time

from market_timers.contracts import environment
from market_timers.contracts.severities import SEVERITIES
from market_timers.files import atomicfile, flatjson

DEFAULT_DIR = f"{environment.DEFAULT_SPOOL_DIR}/events"
FALLBACK_DIR = f"{environment.DEFAULT_RUNTIME_DIR}/events"
DIR_ENV = environment.EVENTS_DIR  # set in every job unit (render.py): <spool_dir>/events
FALLBACK_ENV = environment.LOCK_DIR  # the job unit's runtime_dir; its events/ is the fallback
MAX_TEXT = 2000
MAX_KEY = 200
_KIND_FIRST = "abcdefghijklmnopqrstuvwxyz"
_KIND_REST = _KIND_FIRST + "0123456789_.-"


class EventError(ValueError):
    """A bad argument (kind, severity, value): the caller's mistake, never a disk problem."""


def check_kind(kind: object) -> str:
    # Hand-written instead of `re`: this module is imported by jobs and must stay light.
    if (not isinstance(kind, str) or not 0 < len(kind) <= 40 or kind[0] not in _KIND_FIRST
            or any(c not in _KIND_REST for c in kind)):
        raise EventError(f"event kind must be [a-z][a-z0-9_.-]*, at most 40 characters "
                         f"(got {kind!r})")
    return kind


def _line(text: object, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def make_event(kind: str, *, key: str = "", severity: str = "", text: str = "", job: str = "",
               session: str = "", value: float | None = None, at: float | None = None) -> dict:
    """The event as spooled. `at` is a POSIX time (default: now); `job` and `session` default to
    $MARKET_JOB / $MARKET_SESSION, so a job's events name it without being told."""
    check_kind(kind)
    if severity and severity not in SEVERITIES:
        raise EventError(f"severity must be one of {', '.join(SEVERITIES)} (got {severity!r})")
    if value is not None:
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise EventError(f"value must be a number (got {value!r})") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise EventError(f"value must be a finite number (got {value!r})")
    try:
        at = time.time() if at is None else float(at)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"
    except (TypeError, ValueError, OverflowError, OSError):
        raise EventError(f"at must be a POSIX time (got {at!r})") from None
    return {"v": 1, "kind": kind, "key": _line(key, MAX_KEY),
            "severity": severity or "", "text": _line(text, MAX_TEXT),
            "job": _line(job or os.environ.get(environment.JOB, ""), 64),
            "session": _line(session or os.environ.get(environment.SESSION, ""), 10),
            "value": value, "at": stamp, "uid": os.getuid(), "pid": os.getpid()}


def directories(primary: str | None = None, fallback: str | None = None) -> list[str]:
    primary = primary or os.environ.get(DIR_ENV) or DEFAULT_DIR
    if fallback is None:
        base = os.environ.get(FALLBACK_ENV)
        fallback = os.path.join(base, "events") if base else FALLBACK_DIR
    return [primary] if fallback == primary else [primary, fallback]


def config_directories(spool_dir: str, runtime_dir: str) -> list[str]:
    """The spool directories of a config's spool_dir and runtime_dir (`events` in each)."""
    return directories(os.path.join(spool_dir, "events"), os.path.join(runtime_dir, "events"))


def _write_in(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    try:
        # DURABLE; 0640 exactly: the caller's umask must not hide it from the processor
        atomicfile.write(path, data, mode=0o640, sync=atomicfile.DURABLE)
    except atomicfile.DirSyncError:
        pass  # the file is renamed; a directory that cannot be fsynced (some FUSE) is no reason
        # to spool the event a second time in the fallback directory
    return path


def dumps(event: dict) -> str:
    return flatjson.dumps(event)


def write(event: dict, dirs: list[str] | None = None) -> str:
    """Spool the event; return its path. Tries each directory in turn; raises the first OSError
    only when every directory failed."""
    name = f"{time.time_ns():019d}-{os.getpid()}-{os.urandom(4).hex()}.json"
    data = dumps(event).encode("utf-8", "replace")  # a lone surrogate (odd argv) is no crash
    first: OSError | None = None
    for directory in dirs or directories():
        try:
            return _write_in(directory, name, data)
        except OSError as e:
            first = first or e
    assert first is not None
    raise first


def emit(kind: str, **fields) -> str | None:
    """make_event + write, never raising for a disk problem: returns the path, or None after
    printing the event on stderr (the journal of the caller's unit) at priority crit."""
    event = make_event(kind, **fields)
    try:
        return write(event)
    except OSError as e:
        import sys  # error path only (a job's event() imports os and time)

        prefix = "<2>" if os.environ.get("JOURNAL_STREAM") else ""
        print(f"{prefix}market-timers event: NOT SPOOLED ({e.strerror or e}): {event['kind']} "
              f"key={event['key'] or '-'} at={event['at']} {event['text']}", file=sys.stderr,
              flush=True)
        return None
