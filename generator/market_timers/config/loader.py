"""Load and validate market-timers.toml: the top-level keys and `[overrides]` here, the
`[[job]]` tables in jobs.py, each other table in its own module of config/ (alerts.py,
watch.py, metrics.py, events.py, cluster.py).

All problems are collected and reported together, each naming the file, the key (``job[2].offset``)
and the bad value (see schema/problems.py). Validation happens before anything is written. What needs the
exchange calendars (calendar names, overrides' dates) is checked by calendar_checks.load(), which
calls load() here; this module never imports calendars.py, and commands on the hot path (alert
handlers, records) load the config without it.
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import date, time
from pathlib import Path
from typing import Any

from market_timers.config.dependencies import check_requires
from market_timers.config.jobs import Job, check_unique_names, job_user, parse_job
from market_timers.config.path import config_path  # noqa: F401  (config.loader.config_path)
from market_timers.config.retries import check_order_groups
from market_timers.contracts import environment
from market_timers.schema.durations import MAX_OFFSET
from market_timers.schema.problems import ConfigError, Problems
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import (
    AT_TIME,
    absolute_path,
    as_date,
    date_list,
    text,
    time_of_day,
    whole,
)

DEFAULT_PATH = environment.DEFAULT_CONFIG
ENV_VAR = environment.CONFIG


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
    user: str = environment.DEFAULT_JOB_USER  # the jobs' user (never the package's: jobs.py)
    unit_dir: Path = Path("/etc/systemd/system")
    state_dir: Path = Path(environment.DEFAULT_STATE_DIR)
    spool_dir: Path = Path(environment.DEFAULT_SPOOL_DIR)
    runtime_dir: Path = Path(environment.DEFAULT_RUNTIME_DIR)
    runner: str | None = None
    operator_group: str = ""  # besides root, may pause, halt and resume (controls/access.py)
    on_halt: list[str] = field(default_factory=list)  # run once per `market-timers halt`
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

    def unknown_job(self, name: str) -> str:
        """Why `name` is no job of the config: disabled (`enabled = false`), or none by that
        name (the jobs listed)."""
        tables = self.raw.get("job", [])
        if isinstance(tables, list) and any(
                isinstance(t, dict) and t.get("name") == name and t.get("enabled") is False
                for t in tables):
            return (f"job {name!r} is disabled in {self.source} (enabled = false): set "
                    "enabled = true, or remove the line, to plan it")
        names = ", ".join(j.name for j in self.jobs) or "none"
        return f"no job named {name!r} in {self.source} (jobs: {names})"


def _runner(value: object) -> str:
    value = text(value)
    if not value.startswith("/"):
        raise Bad("must be an absolute path")
    return value


def _operator_group(value: object) -> str:
    """`operator_group`: besides root, its members may pause and resume (controls/access.py).
    Never the package's own group nor the jobs' default user's: a job must not be able to."""
    from market_timers.config.jobs import USER_NAME

    if not isinstance(value, str) or not USER_NAME.match(value):
        raise Bad("must be a group name: a letter or _, then letters, digits, _ or - (at most 31 "
                  "characters)")
    if value in ("root", environment.PACKAGE_USER, environment.DEFAULT_JOB_USER):
        raise Bad(f"the group {value} holds the scheduler's or the jobs' own user: a job could "
                  "pause and resume; make a group of the operators only (e.g. market-ops)")
    return value


def _on_halt(value: object) -> list[str]:
    """`on_halt`: the command a halt runs once (the firm's cancel-all), checked like a job's."""
    from market_timers.config.jobs import command_argv

    if isinstance(value, list) and not value:
        raise Bad("an empty array: leave the key out to run nothing on a halt")
    return command_argv(value)


def _directory(value: object) -> Path:
    return Path(absolute_path(value))


def _moved(value: object) -> tuple[tuple[date, time], ...]:
    """early_close / late_open: "YYYY-MM-DD" = "HH:MM", the exchange's local time that day."""
    if not isinstance(value, dict):
        raise Bad('must be a table of "YYYY-MM-DD" = "HH:MM" (exchange-local time of that day)')
    items, bad = [], []
    for day, hhmm in value.items():
        d = as_date(day)
        if d is None:
            bad.append(Bad("must be a date YYYY-MM-DD", at=f".{day}", shown=day))
        m = AT_TIME.match(hhmm) if isinstance(hhmm, str) else None
        if not m or m.group(4):
            bad.append(Bad('must be "HH:MM" (or "HH:MM:SS") in the exchange\'s local time of '
                           "that day", at=f".{day}", shown=hhmm))
        elif (t := time_of_day(m)) is None:
            bad.append(Bad("not a valid time of day (00:00 to 23:59:59, the exchange's local "
                           "time of that day)", at=f".{day}", shown=hhmm))
        elif d is not None:
            items.append((d, t))
    if bad:
        raise Bad.each(bad)
    return tuple(sorted(items))


def _section(name: str, doc: str) -> Key:
    """A key whose value is a table (or array of tables) of its own, parsed by its module."""
    return Key(name, None, None, doc)


TOP = Table((
    Key("calendar", text, None, "the exchange calendar of every job that names none"),
    Key("horizon", whole(1, 250), 10, "sessions ahead that have timers"),
    Key("retention_days", whole(0, 366), 7, "days of run records and logs kept"),
    Key("user", job_user, environment.DEFAULT_JOB_USER, "the user the jobs run as"),
    Key("runner", _runner, None, "the runner's absolute path"),
    Key("operator_group", _operator_group, "", "the group whose members may pause and resume"),
    Key("on_halt", _on_halt, [], "the absolute program, then its arguments, that a halt runs "
        "once (e.g. the firm's cancel-all)"),
    Key("unit_dir", _directory, Path("/etc/systemd/system"), "where the units are written"),
    Key("state_dir", _directory, Path(environment.DEFAULT_STATE_DIR), "the state directory"),
    Key("spool_dir", _directory, Path(environment.DEFAULT_SPOOL_DIR), "the alert spool"),
    Key("runtime_dir", _directory, Path(environment.DEFAULT_RUNTIME_DIR),
        "the runtime directory"),
    _section("job", "[[job]]: the jobs (config/jobs.py)"),
    _section("overrides", "[overrides.<calendar>]: what the exchange announced"),
    _section("alerts", "[alerts] (config/alerts.py)"),
    _section("watch", "[watch] (config/watch.py)"),
    _section("events", "[events] (config/events.py)"),
    _section("cluster", "[cluster] (config/cluster.py)"),
    _section("metrics", "[metrics] (config/metrics.py)"),
))
TOP_KEYS = set(TOP.names)
OVERRIDE = Table((
    Key("closed", date_list, [], "days the exchange is closed"),
    Key("early_close", _moved, (), "days it closes early, and when"),
    Key("late_open", _moved, (), "days it opens late, and when"),
), not_table="must be a table with closed / early_close / late_open")
OVERRIDE_KEYS = set(OVERRIDE.names)


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


def load(path: str | os.PathLike, *, problems: Problems | None = None) -> Config:
    """Read and validate a config file, except what needs the exchange calendars (that is
    calendar_checks.load, which calls this). Raises ConfigError listing every problem; with
    `problems` given, a file that parses is returned and its problems are left in it."""
    raise_here = problems is None
    problems = Problems(str(path)) if problems is None else problems
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
    if problems and raise_here:
        raise ConfigError(problems)
    return config


def parse(raw: dict, problems: Problems) -> Config:
    """The whole config from the TOML document; every problem added to `problems`."""
    cfg = Config(source=problems.source, raw=raw)
    TOP.unknown(raw, "", problems)
    _top_level(raw, cfg, problems)
    jobs = raw.get("job", [])
    if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
        problems.add("job", "must be an array of tables ([[job]])", jobs)
        jobs = []
    cfg.jobs = [j for i, t in enumerate(jobs)
                if (j := parse_job(t, f"job[{i}]", cfg.calendar, problems))]
    check_unique_names(jobs, problems)
    check_requires(jobs, cfg.jobs, problems)
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
    values = TOP.values(raw, "", problems)
    for key in TOP.keys:
        if key.check is not None:
            setattr(cfg, key.field, values[key.field])
    if cfg.operator_group and cfg.operator_group == cfg.user:
        problems.add("operator_group", f"is the jobs' user {cfg.user!r} (`user`): a job could "
                     "pause and resume; make a group of the operators only", cfg.operator_group)


def _sections(raw: dict, cfg: Config, problems: Problems) -> None:
    """[alerts], [watch], [metrics], [events] and [cluster]: each parsed by its own module."""
    from market_timers.config.alerts import parse_alerts

    cfg.alerts = parse_alerts(raw.get("alerts"), problems)
    if getattr(cfg.alerts, "enabled", False) and isinstance(raw.get("job"), list):
        from market_timers.config.jobs import check_credentials_against_channels

        check_credentials_against_channels(raw["job"], cfg.alerts.credential_owners(), problems)
    from market_timers.config.watch import parse_watch

    cfg.watch = parse_watch(raw.get("watch"), problems)
    from market_timers.config.metrics import parse_metrics

    cfg.metrics = parse_metrics(raw.get("metrics"), problems)
    from market_timers.config.events import events_of_config

    cfg.events = events_of_config(raw, problems)

    from market_timers.config.cluster import check_against_jobs, parse_cluster

    cfg.cluster = parse_cluster(raw.get("cluster"), problems)
    check_against_jobs(cfg.cluster, cfg.jobs, problems)


def _override(table: Any, path: str, problems: Problems) -> Override:
    values = OVERRIDE.parse(table, path, problems)
    if values is None:
        return Override()
    return Override(closed=frozenset(values["closed"]), early_close=values["early_close"],
                    late_open=values["late_open"])
