"""An operator's halt, pause and resume, run by root (issue 41): the request and its answer.

An operator (a member of `operator_group`, not root) can neither write the state directory
(0750) nor stop units, start on_halt or spool the alert. So the command line writes the request
into <REQUESTS_DIR>/in/ (root:<operator_group> 1730: its members create files there and list
none; sticky, so no one replaces another's file and its owner is who wrote it) and waits;
market-controls.path starts `market-timers take-requests` as root, which checks each file (a
regular file of at most MAX_BYTES, one link, owned by root or a member, the format below), runs
the command exactly as root would, and answers in <REQUESTS_DIR>/out/ (root:<operator_group>
0750), a file of the requester's alone (0400), which root removes after ANSWER_KEEP_SEC.

A request, `<32 hex>.json`: {"command": "halt"|"pause"|"resume", "fields": {...}}, the fields
the command line parsed (FIELDS). An answer, the same name: {"status": N, "stdout": "...",
"stderr": "..."}: what root's command printed and its exit status.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import stat
import time
import uuid
from datetime import date
from typing import NamedTuple

from market_timers.contracts.environment import REQUESTS_DIR

MAX_BYTES = 8192
ANSWER_KEEP_SEC = 600.0
NAME = re.compile(r"[0-9a-f]{32}\.json\Z")
_TEXT, _FLAG, _DATE = "text", "flag", "date"
FIELDS = {  # each command's fields and their kinds (a text or a date may be null)
    "halt": {"job": _TEXT, "group": _TEXT, "all_jobs": _FLAG, "reason": _TEXT, "json": _FLAG},
    "pause": {"job": _TEXT, "group": _TEXT, "until": _DATE, "note": _TEXT, "json": _FLAG},
    "resume": {"job": _TEXT, "group": _TEXT, "all_jobs": _FLAG, "json": _FLAG},
}
_REQUIRED = {"halt": ("reason",), "pause": ("note",), "resume": ()}


class Refused(Exception):
    """A request file not taken: why (logged; answered when its owner may ask: `answer_to`,
    (id, uid), is then set)."""

    answer_to: tuple[str, int] | None = None


class Request(NamedTuple):
    id: str
    uid: int
    user: str
    command: str
    fields: dict


def inbox(root: str = REQUESTS_DIR) -> str:
    return os.path.join(root, "in")


def outbox(root: str = REQUESTS_DIR) -> str:
    return os.path.join(root, "out")


def served(root: str = REQUESTS_DIR) -> bool:
    """Whether this host takes requests (sync made in/: the config has an operator_group)."""
    return os.path.isdir(inbox(root))


def send(command: str, fields: dict, root: str = REQUESTS_DIR) -> str:
    """Write the request (PermissionError: not a member); its id. Written aside, then renamed:
    root never reads half a request."""
    rid = uuid.uuid4().hex
    body = json.dumps({"command": command, "fields": fields}).encode()
    aside = os.path.join(inbox(root), f".{rid}.tmp")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, body)
    finally:
        os.close(fd)
    os.rename(aside, os.path.join(inbox(root), f"{rid}.json"))
    return rid


def wait_answer(rid: str, wait_sec: float, root: str = REQUESTS_DIR,
                poll_sec: float = 0.1) -> dict | bool:
    """The answer to request `rid`; after `wait_sec` without one, whether root took the request
    (an untaken one is withdrawn: root will not run it later)."""
    path = os.path.join(outbox(root), f"{rid}.json")
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as f:
                return json.loads(f.read(4 * 1024 * 1024))
        except FileNotFoundError:
            time.sleep(poll_sec)
    try:
        os.unlink(os.path.join(inbox(root), f"{rid}.json"))
    except FileNotFoundError:
        return True
    return False


def member(uid: int, group: str) -> str | None:
    """The user's name when `uid` is root or a member of `group` (primary or supplementary)."""
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return None
    if uid == 0:
        return user.pw_name
    try:
        entry = grp.getgrnam(group) if group else None
    except KeyError:
        return None
    if entry is not None and (user.pw_gid == entry.gr_gid or user.pw_name in entry.gr_mem):
        return user.pw_name
    return None


def read(path: str, operator_group: str) -> Request:
    """The request in `path`, checked (Refused: why not). Opened without following a link and
    checked on the open file, so nothing swapped in between is read."""
    name = os.path.basename(path)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"not a regular file (mode {stat.filemode(st.st_mode)})")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        who = member(st.st_uid, operator_group)
        if who is None:
            raise Refused(f"its owner, uid {st.st_uid}, is neither root nor a member of the "
                          f"operator_group {operator_group or '(none set)'!r}")
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise Refused("not a regular file of one link")
        if not NAME.match(name):
            raise Refused("its name is not <32 hex digits>.json")
        try:
            if st.st_size > MAX_BYTES:
                raise Refused(f"too big: {st.st_size} bytes (at most {MAX_BYTES})")
            command, fields = parse(os.read(fd, MAX_BYTES + 1))
        except Refused as e:  # a member's own request: told why
            e.answer_to = (name.removesuffix(".json"), st.st_uid)
            raise
    finally:
        os.close(fd)
    return Request(name.removesuffix(".json"), st.st_uid, who, command, fields)


def parse(body: bytes) -> tuple[str, dict]:
    """(command, fields) of a request's text (Refused: malformed, naming what)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise Refused(f"malformed: not JSON ({e})") from None
    if not isinstance(doc, dict) or set(doc) != {"command", "fields"}:
        raise Refused("malformed: not an object of command and fields")
    command, fields = doc["command"], doc["fields"]
    if command not in FIELDS:
        raise Refused(f"malformed: command {command!r} is none of {', '.join(FIELDS)}")
    if not isinstance(fields, dict) or not set(fields) <= set(FIELDS[command]):
        raise Refused(f"malformed: {command}'s fields are {', '.join(FIELDS[command])}")
    out = {}
    for key, kind in FIELDS[command].items():
        out[key] = _field(command, key, kind, fields.get(key))
    for key in _REQUIRED[command]:
        if not out[key]:
            raise Refused(f"malformed: {command} needs {key}")
    if sum(bool(out.get(k)) for k in ("job", "group", "all_jobs")) > 1:
        raise Refused(f"malformed: {command} takes one of job, group and all_jobs")
    if command == "pause" and not (out["job"] or out["group"]):
        raise Refused("malformed: pause needs job or group")
    return command, out


def _field(command: str, key: str, kind: str, value):
    if kind == _FLAG:
        if not isinstance(value, bool | None):
            raise Refused(f"malformed: {command}.{key} must be true or false, not {value!r}")
        return bool(value)
    if value is None:
        return None
    if not isinstance(value, str) or "\0" in value:
        raise Refused(f"malformed: {command}.{key} must be a text, not {value!r}")
    if kind == _DATE:
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise Refused(f"malformed: {command}.{key} must be a date, not {value!r}") from None
    return value


def answer(rid: str, uid: int, status: int, stdout: str, stderr: str,
           root: str = REQUESTS_DIR) -> None:
    """The answer, readable by the requester alone (root's directory: no one else writes it)."""
    body = json.dumps({"status": status, "stdout": stdout, "stderr": stderr}).encode()
    aside = os.path.join(outbox(root), f".{rid}.tmp")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o400)
    try:
        os.write(fd, body)
        os.fchmod(fd, 0o400)  # first: once the file is the requester's, root (no CAP_FOWNER)
        os.fchown(fd, uid, -1)  # may no longer change its mode
    finally:
        os.close(fd)
    os.rename(aside, os.path.join(outbox(root), f"{rid}.json"))


def clean_answers(root: str = REQUESTS_DIR, now: float | None = None) -> None:
    """The answers older than ANSWER_KEEP_SEC removed (their requesters have read them)."""
    now = time.time() if now is None else now
    if not os.path.isdir(outbox(root)):
        return
    for entry in os.scandir(outbox(root)):
        if now - entry.stat(follow_symlinks=False).st_mtime > ANSWER_KEEP_SEC:
            os.unlink(entry.path)
