"""The runner's half of a run record: what it writes just before it execs the job.

Imports nothing but `os`. The runner is on the hot path, and json, tempfile and pathlib cost about
12 ms of its start-up (`python -X importtime`), so this tiny writer serialises the record itself;
the values are the runner's own (names, ISO dates, numbers, None), and strings are escaped as
JSON requires. `runrecord` (json) reads and completes the record afterwards.
"""

from __future__ import annotations

import os


def record_path(state_dir: str, job: str, session: str) -> str:
    return os.path.join(state_dir, "runs", job, f"{session}.json")


def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    text = str(v)
    escaped = "".join(c if c >= " " and c not in '"\\' else f"\\u{ord(c):04x}" for c in text)
    return f'"{escaped}"'


def dumps(fields: dict) -> str:
    return "{" + ", ".join(f"{_value(str(k))}: {_value(v)}" for k, v in sorted(fields.items())) \
        + "}\n"


def write_start(state_dir: str, job: str, session: str, fields: dict) -> None:
    """A fresh record for this run (a re-run of the same session replaces the old one)."""
    path = record_path(state_dir, job, session)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, dumps({"job": job, "session": session, **fields}).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
