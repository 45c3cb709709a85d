"""`market-timers verify DIR`: systemd-analyze verify + calendar on rendered units.

`systemd-analyze verify` exits 0 on warnings about unknown keys or a bad extra OnCalendar line, and
`systemd-analyze calendar` prints "Next elapse: never" with exit 0 for a past timestamp, so both
outputs are read, not just their exit codes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

MISSING_ANALYZE = ("systemd-analyze is not installed: install the Debian package systemd "
                   "(apt install systemd)")


class ToolMissing(Exception):
    """A program verify needs is not on PATH (the message names its Debian package)."""


def verify(directory: Path) -> list[str]:
    """Complaints about the units in directory (empty when all is well); ToolMissing without
    systemd-analyze."""
    if shutil.which("systemd-analyze") is None:
        raise ToolMissing(MISSING_ANALYZE)
    units = sorted(p for p in directory.iterdir()
                   if p.suffix in (".timer", ".service") and p.is_file())
    if not units:
        return [f"{directory}: no .timer or .service files"]
    complaints = []
    for i in range(0, len(units), 200):  # keep command lines short
        batch = units[i:i + 200]
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no", *map(str, batch)],
                              capture_output=True, text=True)
        for line in (proc.stdout + proc.stderr).splitlines():
            if line.strip() and _about_ours(line, batch):
                complaints.append(line.strip())
        if proc.returncode != 0 and not complaints:
            complaints.append(f"systemd-analyze verify exited {proc.returncode}: "
                              f"{proc.stderr.strip()}")
    specs = {}
    for p in units:
        if p.suffix == ".timer":
            for line in p.read_text().splitlines():
                if line.startswith("OnCalendar="):
                    specs.setdefault(line.split("=", 1)[1], []).append(p.name)
    complaints += check_calendar(specs)
    return complaints


def _about_ours(line: str, batch: list[Path]) -> bool:
    return any(p.name in line or str(p) in line for p in batch) or "market-" in line


def check_calendar(specs: dict[str, list[str]]) -> list[str]:
    if not specs:
        return []
    proc = subprocess.run(["systemd-analyze", "calendar", "--iterations=1", *specs],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"systemd-analyze calendar: {proc.stderr.strip()}"]
    out = []
    # One block per expression, in the order given; "Original form:" only when it differs.
    blocks = [b for b in proc.stdout.split("\n\n") if b.strip()]
    never = {spec for spec, block in zip(specs, blocks, strict=False)
             if "Next elapse: never" in block}
    # A periodic job's timer has several lines: it is only dead when all of them are past.
    lines_of: dict[str, list[str]] = {}
    for spec, units in specs.items():
        for unit in units:
            lines_of.setdefault(unit, []).append(spec)
    for spec in specs:
        if spec in never:
            for unit in specs[spec]:
                if all(s in never for s in lines_of[unit]):
                    out.append(f"{unit}: OnCalendar={spec} is in the past (Next elapse: never)")
    return out
