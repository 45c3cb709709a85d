"""Checks of single config values, shared by the config's tables (config/).

The first ones add a problem naming the key path and the value, and return the parsed value or a
default; the checks of a `Key` (schema/table.py), at the end, return the value to keep or raise
`Bad(reason)`.
"""

from __future__ import annotations

import re
from datetime import date, time
from typing import Any

from market_timers.schema.problems import Problems
from market_timers.schema.table import Bad

# Characters no value may carry into a unit file: C0 controls (a newline starts a new directive),
# DEL and C1. A tab is allowed only where the renderer escapes it (command arguments, environment).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
AT_TIME = re.compile(r"^(\d{2}):(\d{2})(?::(\d{2}))?(?:\s+(\S+))?$")


def time_of_day(m: re.Match) -> time | None:
    try:
        return time(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    except ValueError:  # "24:00", "13:60"
        return None


def dates(value: Any, path: str, problems: Problems) -> list[date]:
    if not isinstance(value, list):
        problems.add(path, "must be an array of dates (YYYY-MM-DD)", value)
        return []
    return [d for i, v in enumerate(value) if (d := one_date(v, f"{path}[{i}]", problems))]


def one_date(value: Any, path: str, problems: Problems) -> date | None:
    d = as_date(value)
    if d is None:
        problems.add(path, "must be a date YYYY-MM-DD", value)
    return d


def parsed(fn, value: Any, path: str, problems: Problems, default: int | None) -> int | None:
    try:
        return fn(value)
    except ValueError as e:
        problems.add(path, str(e), value)
        return default


def nonempty_str(raw: dict, key: str, problems: Problems, path: str) -> str | None:
    value = raw[key]
    if not isinstance(value, str) or not value:
        problems.add(path, "must be a non-empty string", value)
        return None
    if not unit_safe(value, path, problems):
        return None
    return value


def unit_safe(value: str, path: str, problems: Problems, *, tab: bool = False) -> bool:
    """False (and a problem) for a value that could break out of its line in a unit file.

    render.py escapes every value for its directive; this refuses what no escaping makes
    harmless everywhere: control characters (a newline would start a new directive, e.g.
    ExecStartPre=+... run as root) and a trailing backslash (systemd joins the next line).
    """
    reason = unit_unsafe(value, tab=tab)
    if reason:
        problems.add(path, reason, value)
        return False
    return True


def unit_unsafe(value: str, *, tab: bool = False) -> str:
    """Why `value` could break out of its line in a unit file ("": it cannot; see unit_safe)."""
    m = (_CONTROL_BUT_TAB if tab else _CONTROL).search(value)
    if m:
        return (f"contains the control character U+{ord(m.group()):04X}; values written into "
                "systemd units may not hold control characters (a newline would start a new "
                "unit directive)")
    if value.endswith("\\"):
        return ("ends with a backslash; values written into systemd units may not (systemd "
                "would join the next line of the unit to it)")
    return ""


def normal_path(value: str, path: str, problems: Problems) -> bool:
    reason = path_problem(value)
    if reason:
        problems.add(path, reason, value)
        return False
    return True


def path_problem(value: str) -> str:
    """Why `value` cannot be a path in a unit ("": it can; see normal_path)."""
    if reason := unit_unsafe(value):
        return reason
    if ".." in value.split("/"):
        return "must not contain '..' (systemd ignores such a path in ReadWritePaths=)"
    return ""


def whole_number(value: Any, path: str, problems: Problems, lo: int, hi: int,
                 default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        problems.add(path, f"must be a whole number from {lo} to {hi}", value)
        return default
    return value


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
