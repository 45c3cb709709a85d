"""The spooled event files as the processor takes them in: listed in arrival order, each read and
checked field by field, a file that is not a valid event set aside in `events.bad/` (never
routed, so no file can stop a pass), and the temp files of dead writers swept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from market_timers.config.events import KIND
from market_timers.events import spool
from market_timers.events.plan_lookup import parse_at
from market_timers.events.store import Store
from market_timers.files import regularfile

log = logging.getLogger("market_timers.events")
MAX_FILE = 64 * 1024
STALE_TEMP = 60  # seconds


def pending(dirs: list[str]) -> list[Path]:
    """Spooled event files of every directory, in arrival order (their names)."""
    files = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        files += [Path(d) / n for n in names if n.endswith(".json") and not n.startswith(".")]
    return sorted(files, key=lambda p: p.name)


# What a spooled event may hold: anything else is set aside, never routed, so that no file can
# stop the pass (a year-1 `at` overflowed the clock arithmetic, a 400-digit value the float
# conversion, deep nesting the JSON parser's recursion, a 300-character session the file names).
# An event older than this at its arrival is refused: years are fine (a replay of a past stream
# through `market-timers event --now`), year 1 is not.
MAX_PAST = timedelta(days=3660)
MAX_FUTURE = timedelta(minutes=5)  # clock skew allowed; later is clamped to the arrival
MAX_FIELD = {"kind": 40, "key": spool.MAX_KEY, "text": spool.MAX_TEXT + 1, "job": 64,
             "session": 10, "severity": 10}
MAX_VALUE = 1e15
MAX_BAD = 1000  # files kept in events.bad/; beyond, a bad file is deleted (and still counted)


def read_event(path: Path, now: datetime | None = None) -> dict:
    """The event in `path`, checked field by field; ValueError naming what is wrong with it.

    `now` (the pass's instant) bounds its time: older than MAX_PAST is refused; later than
    now + MAX_FUTURE (a gateway's clock ahead) is clamped to its arrival, the file's mtime, and
    the event says so (`clamped_from`)."""
    data, st = regularfile.read(path, MAX_FILE)
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's
        raise ValueError("not valid JSON (or nested too deeply)") from None
    if not isinstance(event, dict) or not KIND.match(str(event.get("kind", ""))):
        raise ValueError("no valid kind")
    for key, limit in MAX_FIELD.items():
        value = event.get(key, "")
        if value is None and key == "severity":
            continue
        if not isinstance(value, str):
            raise ValueError(f"{key} is not a string")
        if len(value) > limit:
            raise ValueError(f"{key} is longer than {limit} characters")
    if event.get("severity") not in ("", None, *spool.SEVERITIES):
        raise ValueError("bad severity")
    if event.get("session") and not _is_date(event["session"]):
        raise ValueError(f"session {event['session']!r} is not a YYYY-MM-DD date")
    value = event.get("value")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("value is not a number")
        try:
            finite = abs(float(value)) <= MAX_VALUE
        except OverflowError:
            finite = False
        if not finite:
            raise ValueError(f"value is not a finite number within ±{MAX_VALUE:g}")
    try:
        at = parse_at(event.get("at", ""))
    except (TypeError, ValueError) as e:
        raise ValueError(f"at is not an instant ({e})") from None
    event["writer_uid"] = st.st_uid  # the file's owner, never what the file says (see writers)
    if now is not None:
        arrival = min(datetime.fromtimestamp(st.st_mtime, UTC), now)
        if at < arrival - MAX_PAST:
            raise ValueError(f"at {event['at']} is more than {MAX_PAST.days // 366} years before "
                             "it was spooled")
        if at > now + MAX_FUTURE:
            event["clamped_from"] = event["at"]
            event["at"] = arrival.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return event


def _is_date(text: str) -> bool:
    try:
        return len(text) == 10 and bool(date.fromisoformat(text))
    except ValueError:
        return False


def set_aside(path: Path, reason: str) -> str:
    """Move a bad file to the sibling `events.bad/` (kept for a look, at most MAX_BAD files; out
    of the path unit's watched directory, so it does not start the processor again and again).
    Returns where it went."""
    target = path.parent.with_name(path.parent.name + ".bad") / path.name
    try:
        target.parent.mkdir(mode=0o750, exist_ok=True)
        if len(os.listdir(target.parent)) >= MAX_BAD:
            raise OSError(f"{target.parent} already holds {MAX_BAD} files")
        os.rename(path, target)
        where = str(target)
    except OSError as e:
        with contextlib.suppress(OSError):
            path.unlink()
        where = f"deleted ({e.strerror or e})"
    log.error("events: %s set aside: %s", path, reason)
    return where


def refused_writer(ecfg, event: dict) -> tuple[str, str] | None:
    """(who, why) the event's writer may not send it (an incident rule's `writers`), or None;
    who: "nobody (uid 65534)".

    The spool directories are sticky: a writer cannot replace or remove another's file, so the
    owner of a file is who wrote it. Root and the processor's own user are always writers."""
    rule = ecfg.incident_for(event["kind"]) if ecfg is not None else None
    writers, what = ((rule.writers, f"open or close a {rule.name} incident")
                     if rule is not None and rule.writers else
                     (getattr(ecfg, "writers", ()), "spool events"))
    uid = event.get("writer_uid")
    if not writers or uid in (0, os.geteuid()):
        return None
    allowed = set()
    for name in writers:
        with contextlib.suppress(KeyError):
            allowed.add(pwd.getpwnam(name).pw_uid)
    if uid in allowed:
        return None
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = None
    where = "" if writers is getattr(rule, "writers", None) else "[events] "
    return (f"{name} (uid {uid})" if name else f"uid {uid}",
            f"written by {name or f'uid {uid}'}, who may not {what} ({where}writers: "
            f"{', '.join(writers)}): refused, never routed")


def read_ready(store: Store, files: list[Path], now: datetime, ecfg=None) -> tuple[
        list[tuple[Path, dict]], list[tuple[Path, str, str]], list[tuple[Path, str, str, str]]]:
    """(path, event) of each file to route, with its id; (path, reason, where) of each set
    aside. A file whose id the store has seen (routed before a crash removed it) goes. With the
    rules (`ecfg`), an event from a writer its incident rule does not name is set aside too:
    (path, who, reason, where) of each, apart from the malformed (told apart)."""
    bad: list[tuple[Path, str, str]] = []
    refused: list[tuple[Path, str, str, str]] = []
    ready: list[tuple[Path, dict]] = []
    for path in files:
        event_id = path.name.removesuffix(".json")
        if store.seen(event_id):
            path.unlink(missing_ok=True)
            continue
        try:
            event = read_event(path, now)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            reason = getattr(e, "strerror", None) or str(e)
            bad.append((path, reason, set_aside(path, reason)))
            continue
        if writer := refused_writer(ecfg, event):
            who, reason = writer
            refused.append((path, who, reason, set_aside(path, reason)))
            continue
        if "clamped_from" in event:
            log.warning("events: %s is dated %s, ahead of this host's clock: taken as spooled "
                        "at %s", path.name, event["clamped_from"], event["at"])
        event["id"] = event_id
        ready.append((path, event))
    return ready, bad, refused


def sweep_temp(dirs: list[str], now: float) -> None:
    """Remove the temp file of a writer that died mid-write (a write takes milliseconds)."""
    for d in dirs:
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                if name.startswith(".") and name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        if now - os.lstat(os.path.join(d, name)).st_mtime > STALE_TEMP:
                            os.unlink(os.path.join(d, name))
