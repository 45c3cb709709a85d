"""A planned fire as the watch reads it: plan.json, when a fire counts as missed, its timer's state.

Shared by the dead-man pass, `status` and the metrics (which count missed sessions the same way).
"""

from __future__ import annotations

import os
from pathlib import Path

from market_timers.contracts import planfile
from market_timers.contracts.planfile import (  # noqa: F401  (the watch's readers use fires.deadline)
    deadline,
)

PLAN_FILE = planfile.FILE


_read: dict[str, tuple[tuple, dict]] = {}  # state_dir -> (plan.json's identity, its document)


def read_plan(state_dir: Path) -> dict | None:
    """plan.json as written by sync (planfile.read_json), or None when sync has never run. Read
    once per process while the file stays the same (inode, mtime, size: sync replaces it by a
    rename): the dead-man's pass and its page rebuild both read 17,000 fires at 1,000 jobs. The
    readers never change the document."""
    try:
        st = os.stat(planfile.path(state_dir), follow_symlinks=False)
        identity = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
    except OSError:
        identity = None
    kept = _read.get(os.fspath(state_dir))
    if identity is not None and kept is not None and kept[0] == identity:
        return kept[1]
    doc = planfile.read_json(state_dir)
    if identity is not None and doc is not None:
        _read.clear()  # one plan kept: a process reads one state directory
        _read[os.fspath(state_dir)] = (identity, doc)
    return doc


def timer_state(props: dict[str, str]) -> str:
    """waiting | elapsed | missing | inactive | unknown | <LoadState>/<ActiveState>/<SubState>."""
    load, active, sub = (props.get(k, "") for k in ("LoadState", "ActiveState", "SubState"))
    if not load:
        return "unknown"
    if load == "not-found":
        return "missing"
    if load == "loaded" and active == "active":
        return sub if sub in ("waiting", "elapsed") else f"active/{sub or '?'}"
    if load == "loaded" and active in ("inactive", "failed"):
        return active
    return f"{load}/{active or '?'}/{sub or '?'}"
