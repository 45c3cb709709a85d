"""The nice value a pre-fired job runs at: the one its unit would give it without the lead.

A pre-fired unit (MARKET_LEAD_SEC) has `Nice=-10` (contracts/environment.py) so that the runner's
wake-up at the instant is prompt. The job, and the record step (ExecStopPost=), run at the nice
value the unit would have without that line: 0 (a service inherits the service manager's), or the
`Nice=` of a drop-in (`/etc/systemd/system/market-<job>@.service.d/*.conf`: README, "Adding a
directive the config does not offer"). systemd applies one `Nice=`, the last it reads, and it
reads the drop-ins after the unit file: a drop-in's `Nice=` replaces the unit's -10, so the runner
starts at the drop-in's value (and waits at it). Hence:

* started at any value but -10: a drop-in set it (or an empty `Nice=` in one removed the unit's);
  it is the job's, and it is kept;
* started at -10: the unit's own value or a drop-in's `Nice=-10`, which only the drop-ins tell
  apart. The runner reads the unit's drop-ins where systemd reads them (SEARCH_PATH, the names of
  dropin_dirs(), the order of dropin_files(): those of systemd 252 and 257, checked against
  `systemctl show -p DropInPaths` by tests/e2e/test_dropins.py) and keeps -10 when the last
  `Nice=` they set is -10; otherwise it returns to 0.

It only ever raises its own nice value (from -10 to 0), which needs no privilege.
On the hot path: os only, and the drop-in directories are read only at a start at -10.
"""

from __future__ import annotations

import os

from market_timers.contracts import environment
from market_timers.contracts.environment import DEFAULT_NICE, PRE_FIRE_NICE
from market_timers.runner.start import WARNING, log

# The system service manager's unit search path, in its order of precedence (systemd.unit(5)):
# a drop-in file hides one of the same name further down. /lib is /usr/lib on a merged /usr.
SEARCH_PATH = (
    "/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
    "/run/systemd/generator.early", "/etc/systemd/system", "/etc/systemd/system.attached",
    "/run/systemd/system", "/run/systemd/system.attached", "/run/systemd/generator",
    "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
    "/run/systemd/generator.late",
)
NICE_RANGE = range(-20, 20)


def job_nice(env: dict, current: int | None = None, unit: str | None = None,
             search_path: tuple[str, ...] = SEARCH_PATH) -> int | None:
    """The nice value to set before the job (or the record step) runs, or None: keep this one.
    current: this process's nice value (read when None); unit: this process's unit (read from
    /proc/self/cgroup when None)."""
    try:
        if int(env.get(environment.LEAD_SEC) or 0) <= 0:
            return None  # no Nice= in the unit: whatever the process has is the job's
        if current is None:
            current = os.getpriority(os.PRIO_PROCESS, 0)
    except (ValueError, OSError):
        return None
    if current != PRE_FIRE_NICE:
        return None  # a drop-in's Nice= (or its empty Nice=) replaced the unit's
    unit = unit or unit_name()
    if unit is not None and dropin_nice(dropin_files(unit, search_path)) == PRE_FIRE_NICE:
        return None  # a drop-in's own Nice=-10
    return DEFAULT_NICE


def set_nice(value: int | None) -> None:
    """Set this process's nice value (None: leave it); a failure is logged, the run goes on."""
    if value is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, value)
    except OSError as e:
        log(WARNING, f"cannot return to nice {value}: {e.strerror}")


def unit_name(cgroup: str = "/proc/self/cgroup") -> str | None:
    """This process's job unit (`market-<job>@<instance>.service`), from its cgroup; None when it
    is not in one (run by hand)."""
    try:
        with open(cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        name = line.rsplit("/", 1)[-1]
        if name.startswith("market-") and "@" in name and name.endswith(".service"):
            return name
    return None


def dropin_dirs(unit: str) -> list[str]:
    """The names of the unit's drop-in directories, most specific first, as systemd looks for
    them: the instance's, the template's, each prefix of the name cut after a dash, the type's
    (`market-a-b@x.service.d`, `market-a-b@.service.d`, `market-a-.service.d`,
    `market-.service.d`, `service.d`)."""
    stem, _, kind = unit.rpartition(".")
    prefix, at, _ = stem.partition("@")
    names = [unit] + ([f"{prefix}@.{kind}"] if at else [])
    cut = len(prefix)
    while (cut := prefix.rfind("-", 0, cut)) > 0:
        names.append(f"{prefix[:cut + 1]}.{kind}")
    return [f"{n}.d" for n in dict.fromkeys(names)] + [f"{kind}.d"]


def dropin_files(unit: str, search_path: tuple[str, ...] = SEARCH_PATH) -> list[str]:
    """The unit's drop-in files in the order systemd applies them: every `*.conf` (not hidden)
    of its drop-in directories, sorted by file name; of two with one name, the one in the
    earlier directory of search_path (then of dropin_dirs()) hides the other (a link to
    /dev/null hides it and reads empty)."""
    chosen: dict[str, str] = {}
    names = dropin_dirs(unit)
    for base in search_path:
        for name in names:
            path = f"{base}/{name}"
            try:
                entries = os.listdir(path)
            except OSError:
                continue
            for entry in entries:
                if entry.endswith(".conf") and not entry.startswith(".") and entry not in chosen:
                    chosen[entry] = f"{path}/{entry}"
    return [chosen[name] for name in sorted(chosen)]


def dropin_nice(files: list[str]) -> int | None:
    """The value of the last valid `Nice=` of [Service] in files, or None: none sets it, or the
    last is an empty `Nice=` (which removes the setting). An invalid value is skipped, as
    systemd skips it."""
    value = None
    for path in files:
        for text in _values(path, "Service", "Nice"):
            digits = text[1:] if text[:1] in "+-" else text
            if text == "":
                value = None
            elif digits.isascii() and digits.isdigit() and int(text) in NICE_RANGE:
                value = int(text)
    return value


def _values(path: str, section: str, key: str) -> list[str]:
    """The values assigned to key in section of one unit file (systemd.syntax(7): comments
    start with # or ;, a line ending in a backslash goes on on the next)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out, current, pending = [], None, None
    for raw in lines:
        line = raw.strip()
        if line[:1] in ("#", ";") or (not line and pending is None):
            continue
        if pending is not None:
            line = f"{pending} {line}"
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        pending = None
        if line.startswith("["):
            current = line[1:-1] if line.endswith("]") else None
            continue
        name, eq, value = line.partition("=")
        if eq and current == section and name.strip() == key:
            out.append(value.strip())
    return out
