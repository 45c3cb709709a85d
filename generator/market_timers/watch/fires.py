"""A planned fire as the watch reads it: plan.json, when a fire counts as missed, its timer's state.

Shared by the dead-man pass, `status` and the metrics (which count missed sessions the same way).
"""

from __future__ import annotations

from pathlib import Path

from market_timers.contracts import planfile
from market_timers.contracts.planfile import (  # noqa: F401  (the watch's readers use fires.deadline)
    deadline,
)

PLAN_FILE = planfile.FILE


def read_plan(state_dir: Path) -> dict | None:
    """plan.json as written by sync (planfile.read_json), or None when sync has never run."""
    return planfile.read_json(state_dir)


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
