"""Load and validate market-timers.toml.

All problems are collected and reported together, each naming the file, the key (``job[2].offset``)
and the bad value (see errors.py). Validation happens before anything is written. Exchange calendar
names are checked by calendars.check_config(), which imports exchange_calendars; commands on the hot
path (alert handlers, records) load the config without it.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import date, time
from pathlib import Path
from typing import Any

from .durations import DURATION_EXAMPLE, MAX_OFFSET, parse_duration, parse_offset
from .errors import ConfigError, Problems
from .periodic import PERIODIC_KEYS, Periodic, parse_periodic
from .retries import check_order_groups, retry_fields

DEFAULT_PATH = "/etc/market-timers/market-timers.toml"
ENV_VAR = "MARKET_TIMERS_CONFIG"

EVENTS = ("open", "close", "break_start", "break_end")
SEVERITIES = ("critical", "warning", "info")
# Job names become part of unit names (market-<job>@<session>-<HHMMSS>.timer) and of journal
# fields: keep them to a conservative subset of systemd's unit-name characters.
JOB_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# systemd's strict user-name rule (valid_user_group_name): no specifier `%`, no quoting needed.
USER_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,30}$")
# Characters no value may carry into a unit file: C0 controls (a newline starts a new directive),
# DEL and C1. A tab is allowed only where the renderer escapes it (command arguments, environment).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# Bounds of a job's durations (seconds), with why.
MAX_GRACE = (MAX_OFFSET, "a start later than that belongs to another session")
MAX_TIMEOUT = (24 * 3600, "a run longer than a day would overlap the next session's run")
AT_TIME = re.compile(r"^(\d{2}):(\d{2})(?::(\d{2}))?(?:\s+(\S+))?$")

DST_EXPLANATION = (
    "schedules in a local wall-clock time are refused: around a daylight-saving change such a "
    "time happens twice or not at all, and cron implementations disagree on what to do then. "
    "Tie market jobs to the exchange calendar (event + offset, which follows the exchange's own "
    "time zone) and write fixed jobs in UTC, e.g. at = \"02:30 UTC\""
)

TOP_KEYS = {
    "calendar", "horizon", "retention_days", "user", "unit_dir", "state_dir", "spool_dir",
    "runtime_dir", "runner", "job", "overrides", "alerts", "watch", "events", "cluster",
    "metrics",
}
JOB_KEYS = {
    "name", "event", "offset", "command", "calendar", "at", "grace", "timeout", "watchdog",
    "lock", "severity", "skip", "environment", "description", "enabled", "read_write_paths",
    "lead", "warm",
    "retries", "retry_delay", "retry_delay_max", "orders",  # retries.py
}
JOB_KEYS |= PERIODIC_KEYS  # every, from, until, during_break, stall_after: periodic.py
REFUSED_JOB_KEYS = {"timezone", "tz", "time", "cron", "local_time"}
OVERRIDE_KEYS = {"closed", "early_close", "late_open"}


@dataclass(frozen=True)
class Job:
    name: str
    command: tuple[str, ...]
    event: str | None = None  # None for a daily job at a fixed UTC time (`at`)
    offset: int = 0  # seconds, signed
    calendar: str | None = None  # as written (resolved by calendars.check_config)
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


@dataclass(frozen=True)
class Override:
    closed: frozenset[date] = frozenset()
    early_close: tuple[tuple[date, time], ...] = ()  # exchange-local wall time of that day
    late_open: tuple[tuple[date, time], ...] = ()


@dataclass
class Config:
    source: str
    calendar: str | None = None
    horizon: int = 10
    retention_days: int = 7
    user: str = "market-timers"
    unit_dir: Path = Path("/etc/systemd/system")
    state_dir: Path = Path("/var/lib/market-timers")
    spool_dir: Path = Path("/var/spool/market-timers")
    runtime_dir: Path = Path("/run/market-timers")
    runner: str | None = None
    jobs: list[Job] = field(default_factory=list)
    overrides: dict[str, Override] = field(default_factory=dict)
    alerts: Any = None
    watch: Any = None
    metrics: Any = None  # metrics_config.MetricsConfig
    events: Any = None  # events.config.EventsConfig
    cluster: Any = None  # cluster_config.ClusterConfig, or None: the local ledger
    raw: dict = field(default_factory=dict)

    def job(self, name: str) -> Job:
        for j in self.jobs:
            if j.name == name:
                return j
        raise KeyError(name)


DIGEST_JOB = "digest"  # built in when [alerts.email] exists: the per-session email digest


def default_runner() -> str:
    """The runner beside the interpreter running us (the venv's bin/, /opt/venvs/... in the deb)."""
    return str(Path(sys.executable).parent / "market-timers-run")


def _digest_job(cfg: Config, problems: Problems) -> Job | None:
    """The session digest: a job like the others, after each close of the default calendar."""
    alerts = cfg.alerts
    if not (alerts is not None and getattr(alerts, "enabled", False)
            and getattr(alerts, "email", None) is not None):
        return None
    if any(j.name == DIGEST_JOB for j in cfg.jobs):
        problems.add("job", f"the job name {DIGEST_JOB!r} is reserved for the session digest "
                     "when [alerts.email] is configured")
        return None
    calendar = cfg.calendar or next((j.calendar for j in cfg.jobs if j.is_session_job), None)
    if calendar is None:
        return None
    offset = int(alerts.digest_offset_minutes * 60)
    if not 0 <= offset <= MAX_OFFSET:
        problems.add("alerts.digest_offset_minutes", "must be at most 1439 (the digest is sent "
                     "within a day of the close)", alerts.digest_offset_minutes)
        return None
    tool = str(Path(cfg.runner or default_runner()).parent / "market-timers")
    return Job(name=DIGEST_JOB, command=(tool, "digest"), event="close",
               offset=offset, calendar=calendar,
               severity="warning", timeout=600, read_write_paths=(str(cfg.spool_dir),),
               description="email digest of the session")


def config_path(cli_value: str | None) -> str:
    return cli_value or os.environ.get(ENV_VAR) or DEFAULT_PATH


def load(path: str | os.PathLike, *, check_calendars: bool = True) -> Config:
    """Read and validate a config file. Raises ConfigError listing every problem."""
    source = str(path)
    problems = Problems(source)
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        problems.add("(file)", f"no such file; give the config with --config FILE or "
                     f"${ENV_VAR} (default {DEFAULT_PATH})")
        raise ConfigError(problems) from None
    except PermissionError:
        problems.add("(file)", "permission denied")
        raise ConfigError(problems) from None
    except tomllib.TOMLDecodeError as e:
        problems.add("(file)", f"not valid TOML: {e}")
        raise ConfigError(problems) from None
    config = parse(raw, problems)
    if check_calendars:  # in the same pass: every problem at once, calendar ones included
        from .calendars import check_config

        check_config(config, problems)
    if problems:
        raise ConfigError(problems)
    return config


def parse(raw: dict, problems: Problems) -> Config:
    """The whole config from the TOML document; every problem added to `problems`."""
    cfg = Config(source=problems.source, raw=raw)
    for key in sorted(set(raw) - TOP_KEYS):
        problems.add(key, f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")
    _top_level(raw, cfg, problems)
    jobs = raw.get("job", [])
    if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
        problems.add("job", "must be an array of tables ([[job]])", jobs)
        jobs = []
    cfg.jobs = [j for i, t in enumerate(jobs) if (j := _job(t, f"job[{i}]", cfg, problems))]
    _check_unique_names(jobs, problems)
    check_order_groups(jobs, cfg.jobs, problems)
    overrides = raw.get("overrides", {})
    if not isinstance(overrides, dict):
        problems.add("overrides", "must be a table of calendars ([overrides.XNYS])", overrides)
        overrides = {}
    for cal, table in overrides.items():
        cfg.overrides[cal] = _override(table, f"overrides.{cal}", problems)
    _sections(raw, cfg, problems)
    if (digest := _digest_job(cfg, problems)) is not None:
        cfg.jobs.append(digest)
    return cfg


def _top_level(raw: dict, cfg: Config, problems: Problems) -> None:
    """calendar, horizon, retention_days, user, runner and the directories."""
    if "calendar" in raw:
        cfg.calendar = _str(raw, "calendar", problems, "calendar")
    if "horizon" in raw:
        cfg.horizon = _int(raw["horizon"], "horizon", problems, 1, 250, cfg.horizon)
    if "retention_days" in raw:
        cfg.retention_days = _int(raw["retention_days"], "retention_days", problems, 0, 366,
                                  cfg.retention_days)
    if "user" in raw:
        cfg.user = _str(raw, "user", problems, "user")
        if cfg.user and not USER_NAME.match(cfg.user):
            problems.add("user", "must be a user name: a letter or _, then letters, digits, _ "
                         "or - (at most 31 characters)", cfg.user)
    if "runner" in raw:
        cfg.runner = _str(raw, "runner", problems, "runner")
        if cfg.runner and not cfg.runner.startswith("/"):
            problems.add("runner", "must be an absolute path", cfg.runner)
    for key in ("unit_dir", "state_dir", "spool_dir", "runtime_dir"):
        if key in raw:
            value = _str(raw, key, problems, key)
            if value is not None and not value.startswith("/"):
                problems.add(key, "must be an absolute path", value)
            elif value is not None and _normal_path(value, key, problems):
                setattr(cfg, key, Path(value))


def _sections(raw: dict, cfg: Config, problems: Problems) -> None:
    """[alerts], [watch], [metrics], [events] and [cluster]: each parsed by its own module."""
    from .alerts.config import parse_alerts

    cfg.alerts = parse_alerts(raw.get("alerts"), problems)
    from .watch_config import parse_watch

    cfg.watch = parse_watch(raw.get("watch"), problems)
    from .metrics_config import parse_metrics

    cfg.metrics = parse_metrics(raw.get("metrics"), problems)
    from .events.config import events_of_config

    cfg.events = events_of_config(raw, problems)

    from .cluster_config import check_against_jobs, parse_cluster

    cfg.cluster = parse_cluster(raw.get("cluster"), problems)
    check_against_jobs(cfg.cluster, cfg.jobs, problems)


def _job(t: dict, path: str, cfg: Config, problems: Problems) -> Job | None:
    """One [[job]] table, or None (with its problems added) when it is bad or disabled."""
    before = len(problems.items)
    _check_job_keys(t, path, problems)
    name = t.get("name")
    if not isinstance(name, str) or not JOB_NAME.match(name):
        problems.add(f"{path}.name", "required; must match [a-z][a-z0-9_-]* (at most 40 "
                     "characters): it becomes part of systemd unit names", name)
    command = _command(t.get("command"), path, problems)
    periodic = parse_periodic(t, path, problems)  # None: not a periodic job (periodic.py)
    kw = _when(t, path, cfg, periodic, problems)
    kw.update(_durations(t, path, periodic, problems))
    kw.update(_pre_fire(t, path, problems))
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


def _when(t: dict, path: str, cfg: Config, periodic: dict | None,
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
        kw["offset"] = _parsed(parse_offset, t["offset"], f"{path}.offset", problems, 0)
    cal = t.get("calendar", cfg.calendar)
    if cal is None:
        problems.add(f"{path}.calendar", "no calendar: set `calendar` at the top of the file "
                     "or in this job")
    elif not isinstance(cal, str):
        problems.add(f"{path}.calendar", "must be a string", cal)
    else:
        unit_safe(cal, f"{path}.calendar", problems)
    kw["calendar"] = cal
    kw["skip"] = frozenset(_dates(t.get("skip", []), f"{path}.skip", problems))
    return kw


def _durations(t: dict, path: str, periodic: dict | None, problems: Problems) -> dict[str, Any]:
    """grace, timeout and watchdog; a periodic job's own fields (and its grace default)."""
    kw: dict[str, Any] = {}
    for key, default, (limit, why) in (("grace", "2min", MAX_GRACE),
                                       ("timeout", "30min", MAX_TIMEOUT)):
        kw[key] = _parsed(lambda v, m=limit, w=why: parse_duration(v, m, w),
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
        kw["watchdog"] = _parsed(lambda v: parse_duration(v, MAX_TIMEOUT[0]), watchdog,
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
        _normal_path(p, f"{path}.read_write_paths[{i}]", problems)
    return tuple(paths)


MAX_LEAD = 600  # seconds


def _pre_fire(t: dict, path: str, problems: Problems) -> dict:
    """`lead` (default 2s; "0s" opts out) and `warm` (default 0s): at most 10min each."""
    out = {}
    for key, default in (("lead", "2s"), ("warm", "0s")):
        value = _parsed(_lead_seconds, t.get(key, default), f"{path}.{key}", problems, None)
        if value is not None:
            out[key] = value
    return out


def _lead_seconds(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"0+(s|min|h)?", value.strip()):
        return 0  # off
    return parse_duration(value, MAX_LEAD, "the timer fires this early and the runner holds "
                          "the job's lock meanwhile")


def _check_unique_names(jobs: list, problems: Problems) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(jobs):
        name = t.get("name") if isinstance(t, dict) else None
        if isinstance(name, str):
            if name in seen:
                problems.add(f"job[{i}].name", f"duplicate job name (also job[{seen[name]}])",
                             name)
            seen.setdefault(name, i)


def _override(table: Any, path: str, problems: Problems) -> Override:
    if not isinstance(table, dict):
        problems.add(path, "must be a table with closed / early_close / late_open", table)
        return Override()
    for key in sorted(set(table) - OVERRIDE_KEYS):
        problems.add(f"{path}.{key}", f"unknown key (known: {', '.join(sorted(OVERRIDE_KEYS))})")
    closed = frozenset(_dates(table.get("closed", []), f"{path}.closed", problems))
    moved = {}
    for key in ("early_close", "late_open"):
        value = table.get(key, {})
        if not isinstance(value, dict):
            problems.add(f"{path}.{key}", 'must be a table of "YYYY-MM-DD" = "HH:MM" '
                         "(exchange-local time of that day)", value)
            value = {}
        items = []
        for day, hhmm in value.items():
            d = _date(day, f"{path}.{key}.{day}", problems)
            m = AT_TIME.match(hhmm) if isinstance(hhmm, str) else None
            if not m or m.group(4):
                problems.add(f"{path}.{key}.{day}", 'must be "HH:MM" (or "HH:MM:SS") in the '
                             "exchange's local time of that day", hhmm)
            elif (t := _time_of_day(m)) is None:
                problems.add(f"{path}.{key}.{day}", "not a valid time of day (00:00 to 23:59:59, "
                             "the exchange's local time of that day)", hhmm)
            elif d is not None:
                items.append((d, t))
        moved[key] = tuple(sorted(items))
    return Override(closed=closed, **moved)


def _time_of_day(m: re.Match) -> time | None:
    try:
        return time(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    except ValueError:  # "24:00", "13:60"
        return None


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


def _dates(value: Any, path: str, problems: Problems) -> list[date]:
    if not isinstance(value, list):
        problems.add(path, "must be an array of dates (YYYY-MM-DD)", value)
        return []
    return [d for i, v in enumerate(value) if (d := _date(v, f"{path}[{i}]", problems))]


def _date(value: Any, path: str, problems: Problems) -> date | None:
    if isinstance(value, date) and not hasattr(value, "hour"):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    problems.add(path, "must be a date YYYY-MM-DD", value)
    return None


def _parsed(fn, value: Any, path: str, problems: Problems, default: int | None) -> int | None:
    try:
        return fn(value)
    except ValueError as e:
        problems.add(path, str(e), value)
        return default


def _str(raw: dict, key: str, problems: Problems, path: str) -> str | None:
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
    m = (_CONTROL_BUT_TAB if tab else _CONTROL).search(value)
    if m:
        problems.add(path, f"contains the control character U+{ord(m.group()):04X}; values "
                     "written into systemd units may not hold control characters (a newline "
                     "would start a new unit directive)", value)
        return False
    if value.endswith("\\"):
        problems.add(path, "ends with a backslash; values written into systemd units may not "
                     "(systemd would join the next line of the unit to it)", value)
        return False
    return True


def _normal_path(value: str, path: str, problems: Problems) -> bool:
    if not unit_safe(value, path, problems):
        return False
    if ".." in value.split("/"):
        problems.add(path, "must not contain '..' (systemd ignores such a path in "
                     "ReadWritePaths=)", value)
        return False
    return True


def _int(value: Any, path: str, problems: Problems, lo: int, hi: int, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        problems.add(path, f"must be a whole number from {lo} to {hi}", value)
        return default
    return value
