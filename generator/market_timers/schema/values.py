"""Checks of single config values, shared by the config's tables (config/): each is a `Key`'s
check (schema/table.py), returning the value to keep or raising `Bad(reason)`; unit_unsafe and
path_problem say why a text cannot go into a unit file ("" when it can).
"""

from __future__ import annotations

import re
from datetime import date, time
from typing import Any

from market_timers.schema.table import Bad

# Characters no value may carry into a unit file: C0 controls (a newline starts a new directive),
# DEL and C1. A tab is allowed only where the renderer escapes it (command arguments, environment).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
AT_TIME = re.compile(r"^(\d{2}):(\d{2})(?::(\d{2}))?(?:\s+(\S+))?\Z")


def time_of_day(m: re.Match) -> time | None:
    try:
        return time(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    except ValueError:  # "24:00", "13:60"
        return None


def unit_unsafe(value: str, *, tab: bool = False) -> str:
    """Why `value` could break out of its line in a unit file ("": it cannot).

    render.py escapes every value for its directive; this refuses what no escaping makes
    harmless everywhere: control characters (a newline would start a new directive, e.g.
    ExecStartPre=+... run as root) and a trailing backslash (systemd joins the next line).
    """
    m = (_CONTROL_BUT_TAB if tab else _CONTROL).search(value)
    if m:
        return (f"contains the control character U+{ord(m.group()):04X}; values written into "
                "systemd units may not hold control characters (a newline would start a new "
                "unit directive)")
    if value.endswith("\\"):
        return ("ends with a backslash; values written into systemd units may not (systemd "
                "would join the next line of the unit to it)")
    return ""


def path_problem(value: str) -> str:
    """Why `value` cannot be a path in a unit ("": it can)."""
    if reason := unit_unsafe(value):
        return reason
    if ".." in value.split("/"):
        return "must not contain '..' (systemd ignores such a path in ReadWritePaths=)"
    return ""


# checks of a Key (schema/table.py): the value to keep, or Bad(reason) -------------------------

def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Bad("must be true or false")
    return value


def whole(lo: int, hi: int):
    """A whole number from lo to hi (not a boolean)."""
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise Bad(f"must be a whole number from {lo} to {hi}")
        return value
    return check


def text(value: Any) -> str:
    """A non-empty string that is safe in a unit file."""
    if not isinstance(value, str) or not value:
        raise Bad("must be a non-empty string")
    if reason := unit_unsafe(value):
        raise Bad(reason)
    return value


def absolute_path(value: Any) -> str:
    """A non-empty, unit-safe absolute path without '..'."""
    value = text(value)
    if not value.startswith("/"):
        raise Bad("must be an absolute path")
    if reason := path_problem(value):
        raise Bad(reason)
    return value


def one_of(choices, reason: str):
    """A value among `choices`; else `reason`."""
    def check(value: Any):
        if value not in choices:
            raise Bad(reason)
        return value
    return check


def date_list(value: Any) -> list[date]:
    """An array of dates (YYYY-MM-DD); each bad one is refused at its index."""
    if not isinstance(value, list):
        raise Bad("must be an array of dates (YYYY-MM-DD)")
    out, bad = [], []
    for i, v in enumerate(value):
        d = as_date(v)
        if d is None:
            bad.append(Bad("must be a date YYYY-MM-DD", at=f"[{i}]", shown=v))
        else:
            out.append(d)
    if bad:
        raise Bad.each(bad)
    return out


def as_date(value: Any) -> date | None:
    """The date of a TOML date or a "YYYY-MM-DD" string; None for anything else."""
    if isinstance(value, date) and not hasattr(value, "hour"):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    return None
