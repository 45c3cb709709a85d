"""The `[[job]]` tables of market-timers.toml: one Job each, every problem named.

config.parse() calls parse_job() for each table; a periodic job's keys are checked by periodic.py
and the retry keys by retries.py. Exchange calendar names are checked later, by
calendar_checks.check_config().
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, time
from typing import Any

from market_timers.config.periodic import PERIODIC_KEYS, Periodic, parse_periodic
from market_timers.config.retries import retry_fields
from market_timers.contracts.severities import SEVERITIES
from market_timers.schema.durations import (
    DURATION_EXAMPLE,
    MAX_OFFSET,
    parse_duration,
    parse_offset,
)
from market_timers.schema.problems import Problems
from market_timers.schema.values import AT_TIME, dates, normal_path, parsed, unit_safe

EVENTS = ("open", "close", "break_start", "break_end")  # the one list (calendars, check-cron)
# Job names become part of unit names (market-<job>@<session>-<HHMMSS>.timer) and of journal
# fields: keep them to a conservative subset of systemd's unit-name characters.
JOB_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Bounds of a job's durations (seconds), with why.
MAX_GRACE = (MAX_OFFSET, "a start later than that belongs to another session")
MAX_TIMEOUT = (24 * 3600, "a run longer than a day would overlap the next session's run")
MAX_LEAD = 600  # seconds

DST_EXPLANATION = (
    "schedules in a local wall-clock time are refused: around a daylight-saving change such a "
    "time happens twice or not at all, and cron implementations disagree on what to do then. "
    "Tie market jobs to the exchange calendar (event + offset, which follows the exchange's own "
    "time zone) and write fixed jobs in UTC, e.g. at = \"02:30 UTC\""
)

JOB_KEYS = {
    "name", "event", "offset", "command", "calendar", "at", "grace", "timeout", "watchdog",
    "lock", "severity", "skip", "environment", "description", "enabled", "read_write_paths",
    "lead", "warm",
    "retries", "retry_delay", "retry_delay_max", "orders",  # retries.py
}
JOB_KEYS |= PERIODIC_KEYS  # every, from, until, during_break, stall_after: periodic.py
REFUSED_JOB_KEYS = {"timezone", "tz", "time", "cron", "local_time"}


@dataclass(frozen=True)
class Job:
    name: str
    command: tuple[str, ...]
    event: str | None = None  # None for a daily job at a fixed UTC time (`at`)
    offset: int = 0  # seconds, signed
    calendar: str | None = None  # as written (resolved by calendar_checks.check_config)
    at_utc: time | None = None
    grace: int = 120
    timeout: int = 1800
    watchdog: int | None = None
    lock: str = ""
    severity: str = "critical"
    skip: frozenset[date] = frozenset()
    environment: tuple[tuple[str, str], ...] = ()
    description: str = ""
    read_write_paths: tuple[str, ...] = ()
    periodic: Periodic | None = None  # `every`: slots inside a window of each session
    lead: int = 2  # the timer fires this early; the runner waits for the instant, then execs
    warm: int = 0  # exec the job this early (it waits with jobnotify.wait_for_instant())
    retries: int = 0  # retries.py: attempts after a failure (idempotent jobs only)
    retry_delay: int = 30
    retry_delay_max: int = 600
    orders: bool = False  # sends orders: never retried, nor any job of its lock group

    @property
    def is_session_job(self) -> bool:
        return self.event is not None

    @property
    def fire_lead(self) -> int:
        """How long before the instant the timer fires: enough for the lead and the warm-up."""
        return max(self.lead, self.warm)


def parse_job(t: dict, path: str, calendar: str | None, problems: Problems) -> Job | None:
    """One [[job]] table, or None (with its problems added) when it is bad or disabled."""
    before = len(problems.items)
    _check_job_keys(t, path, problems)
    name = t.get("name")
    if not isinstance(name, str) or not JOB_NAME.match(name):
        problems.add(f"{path}.name", "required; must match [a-z][a-z0-9_-]* (at most 40 "
                     "characters): it becomes part of systemd unit names", name)
    command = _command(t.get("command"), path, problems)
    periodic = parse_periodic(t, path, problems)  # None: not a periodic job (periodic.py)
    kw = _when(t, path, calendar, periodic, problems)
    kw.update(_durations(t, path, periodic, problems))
    kw.update(_pre_fire(t, path, problems))
    if periodic is not None and kw.get("warm"):
        problems.add(f"{path}.warm", "a periodic job (`every`) runs each slot at its instant "
                     "and is never started early: remove `warm`", t.get("warm"))
    lock = t.get("lock", name)
    if "lock" in t and (not isinstance(lock, str) or not JOB_NAME.match(lock)):
        problems.add(f"{path}.lock", "lock group names follow the job-name rule "
                     "[a-z][a-z0-9_-]*", lock)
    severity = t.get("severity", "critical")
    if severity not in SEVERITIES:
        problems.add(f"{path}.severity", f"one of {', '.join(SEVERITIES)}", severity)
    env = _environment(t, path, problems)
    description = t.get("description", "")
    if not isinstance(description, str):
        problems.add(f"{path}.description", "must be a string", description)
    else:
        unit_safe(description, f"{path}.description", problems)
    kw["read_write_paths"] = _read_write_paths(t, path, problems)
    kw.update(retry_fields(t, path, problems))
    enabled = t.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.add(f"{path}.enabled", "must be true or false", enabled)
    if len(problems.items) != before or not enabled:
        return None
    return Job(name=name, command=tuple(command), lock=lock, severity=severity,
               environment=tuple(sorted(env.items())), description=description, **kw)


def _check_job_keys(t: dict, path: str, problems: Problems) -> None:
    for key in sorted(set(t) - JOB_KEYS):
        if key in REFUSED_JOB_KEYS:
            problems.add(f"{path}.{key}", DST_EXPLANATION, t[key])
        else:
            problems.add(f"{path}.{key}", f"unknown key (known: {', '.join(sorted(JOB_KEYS))})")


def _command(command: Any, path: str, problems: Problems) -> list[str]:
    """`command`: the absolute program, then its arguments ([] when unusable)."""
    if (not isinstance(command, list) or not command
            or not all(isinstance(c, str) and c for c in command)):
        problems.add(f"{path}.command", "required; a non-empty array of strings, the program "
                     "first", command)
        return []
    if not command[0].startswith("/"):
        problems.add(f"{path}.command", "the program must be an absolute path (systemd runs "
                     "it without a shell or your PATH)", command[0])
    else:
        for i, arg in enumerate(command):
            unit_safe(arg, f"{path}.command[{i}]", problems, tab=True)
    return command


def _when(t: dict, path: str, calendar: str | None, periodic: dict | None,
          problems: Problems) -> dict[str, Any]:
    """When the job runs: `at` (daily, fixed UTC time), or event, offset, calendar and skip."""
    kw: dict[str, Any] = {}
    if "at" in t:
        for key in ("event", "offset", "calendar", "skip"):
            if key in t:
                problems.add(f"{path}.{key}", "a job with `at` runs daily at a fixed UTC time "
                             "and is not tied to a session; remove `at` or this key")
        kw["at_utc"] = _at(t["at"], f"{path}.at", problems)
        return kw
    event = t.get("event")
    if periodic is not None:
        event = periodic.get("event", "open")
    elif event not in EVENTS:
        problems.add(f"{path}.event", f"required (or `at` for a fixed UTC time); one of "
                     f"{', '.join(EVENTS)}", event)
    kw["event"] = event
    if "offset" in t:
        kw["offset"] = parsed(parse_offset, t["offset"], f"{path}.offset", problems, 0)
    cal = t.get("calendar", calendar)
    if cal is None:
        problems.add(f"{path}.calendar", "no calendar: set `calendar` at the top of the file "
                     "or in this job")
    elif not isinstance(cal, str):
        problems.add(f"{path}.calendar", "must be a string", cal)
    else:
        unit_safe(cal, f"{path}.calendar", problems)
    kw["calendar"] = cal
    kw["skip"] = frozenset(dates(t.get("skip", []), f"{path}.skip", problems))
    return kw


def _durations(t: dict, path: str, periodic: dict | None, problems: Problems) -> dict[str, Any]:
    """grace, timeout and watchdog; a periodic job's own fields (and its grace default)."""
    kw: dict[str, Any] = {}
    for key, default, (limit, why) in (("grace", "2min", MAX_GRACE),
                                       ("timeout", "30min", MAX_TIMEOUT)):
        kw[key] = parsed(lambda v, m=limit, w=why: parse_duration(v, m, w),
                         t.get(key, default), f"{path}.{key}", problems, None)
    if periodic:
        grace_default = periodic.pop("grace_default", None)
        kw.update(periodic)
        kw["grace"] = grace_default or kw["grace"]
    watchdog = t.get("watchdog", "off")
    if watchdog == 0 and not isinstance(watchdog, bool):  # 0 == False: not a way to say "off"
        problems.add(f"{path}.watchdog", 'write "off" (or leave it out) for no watchdog, or '
                     f"{DURATION_EXAMPLE}", watchdog)
    elif watchdog != "off" and watchdog is not False:
        kw["watchdog"] = parsed(lambda v: parse_duration(v, MAX_TIMEOUT[0]), watchdog,
                                f"{path}.watchdog", problems, None)
        if kw["watchdog"] and kw["timeout"] and kw["watchdog"] >= kw["timeout"]:
            problems.add(f"{path}.watchdog", f"must be shorter than the job's timeout "
                         f"({kw['timeout']} s): the timeout would end the run first", watchdog)
    return kw


def _environment(t: dict, path: str, problems: Problems) -> dict:
    env = t.get("environment", {})
    if not isinstance(env, dict):
        problems.add(f"{path}.environment", "must be a table of NAME = \"value\"", env)
        return {}
    for k, v in env.items():
        if not ENV_NAME.match(k) or k.startswith("MARKET_"):
            problems.add(f"{path}.environment.{k}", "names are upper case [A-Z_][A-Z0-9_]* and "
                         "must not start with MARKET_ (reserved for the job's context)")
        if not isinstance(v, str):
            problems.add(f"{path}.environment.{k}", "must be a string", v)
        else:
            unit_safe(v, f"{path}.environment.{k}", problems, tab=True)
    return env


def _read_write_paths(t: dict, path: str, problems: Problems) -> tuple[str, ...]:
    paths = t.get("read_write_paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/")
                                              for p in paths):
        problems.add(f"{path}.read_write_paths", "must be an array of absolute paths (the "
                     "job's unit is sandboxed with ProtectSystem=strict)", paths)
        return ()
    for i, p in enumerate(paths):
        normal_path(p, f"{path}.read_write_paths[{i}]", problems)
    return tuple(paths)


def _pre_fire(t: dict, path: str, problems: Problems) -> dict:
    """`lead` (default 2s; "0s" opts out) and `warm` (default 0s): at most 10min each."""
    out = {}
    for key, default in (("lead", "2s"), ("warm", "0s")):
        value = parsed(_lead_seconds, t.get(key, default), f"{path}.{key}", problems, None)
        if value is not None:
            out[key] = value
    return out


def _lead_seconds(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"0+(s|min|h)?", value.strip()):
        return 0  # off
    return parse_duration(value, MAX_LEAD, "the timer fires this early and the runner holds "
                          "the job's lock meanwhile")


def _at(value: Any, path: str, problems: Problems) -> time | None:
    m = AT_TIME.match(value.strip()) if isinstance(value, str) else None
    if not m:
        problems.add(path, 'must be "HH:MM UTC" or "HH:MM:SS UTC"', value)
        return None
    hh, mm, ss, zone = m.groups()
    if zone not in ("UTC", "Z", "utc"):
        problems.add(path, DST_EXPLANATION if zone else
                     'name the zone: only "UTC" is accepted, e.g. "02:30 UTC" (' +
                     DST_EXPLANATION + ")", value)
        return None
    try:
        return time(int(hh), int(mm), int(ss or 0))
    except ValueError:
        problems.add(path, "not a valid time of day", value)
        return None


def check_unique_names(jobs: list, problems: Problems) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(jobs):
        name = t.get("name") if isinstance(t, dict) else None
        if isinstance(name, str):
            if name in seen:
                problems.add(f"job[{i}].name", f"duplicate job name (also job[{seen[name]}])",
                             name)
            seen.setdefault(name, i)
