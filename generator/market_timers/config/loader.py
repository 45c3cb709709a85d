"""Load and validate market-timers.toml into a Config: the top-level keys (declared in
toplevel.py), `[overrides]` (overrides.py), the `[[job]]` tables (jobs.py), each other table in
its own module of config/ (alerts.py, watch.py, metrics.py, events.py, cluster.py).

All problems are collected and reported together, each naming the file, the key (``job.signal.offset``)
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
from pathlib import Path
from typing import Any

from market_timers.config import jobidentity
from market_timers.config.alerts import parse_alerts
from market_timers.config.cluster import check_against_jobs, parse_cluster
from market_timers.config.dependencies import check_requires
from market_timers.config.events import events_of_config
from market_timers.config.jobpath import job_lines, job_paths
from market_timers.config.jobs import (
    Job,
    check_credentials_against_channels,
    check_unique_names,
    parse_job,
)
from market_timers.config.metrics import parse_metrics
from market_timers.config.overrides import Override, parse_override
from market_timers.config.path import config_path  # noqa: F401  (config.loader.config_path)
from market_timers.config.retries import check_order_groups
from market_timers.config.toplevel import TOP
from market_timers.config.watch import parse_watch
from market_timers.contracts import environment
from market_timers.schema.durations import MAX_OFFSET
from market_timers.schema.problems import ConfigError, Problems

DEFAULT_PATH = environment.DEFAULT_CONFIG
ENV_VAR = environment.CONFIG


@dataclass
class Config:
    source: str
    calendar: str | None = None
    horizon: int = TOP.key("horizon").default  # one owner: config/toplevel.py
    retention_days: int = 7
    user: str = ""  # every job's user; "": each job one of its own (jobidentity.py)
    unit_dir: Path = Path("/etc/systemd/system")
    state_dir: Path = Path(environment.DEFAULT_STATE_DIR)
    spool_dir: Path = Path(environment.DEFAULT_SPOOL_DIR)
    page_dir: Path = Path(environment.DEFAULT_PAGE_DIR)  # the status page only (statuspage.py)
    runtime_dir: Path = Path(environment.DEFAULT_RUNTIME_DIR)
    runner: str | None = None
    operator_group: str = ""  # besides root, may pause, halt and resume (controls/)
    on_halt: list[str] = field(default_factory=list)  # run once per `market-timers halt`
    jobs: list[Job] = field(default_factory=list)
    shared: dict[str, str] = field(default_factory=dict)  # [shared]: name -> directory
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

    def user_of(self, job: Job) -> str:
        return jobidentity.user_of(self, job)

    def home_of(self, job: Job) -> str | None:
        return jobidentity.home_of(self, job)

    def shared_group(self, name: str) -> str:
        return jobidentity.shared_group(name)

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
            text = f.read().decode()
        raw = tomllib.loads(text)
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
    problems.locate = job_lines(text, raw.get("job"))
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
    cfg.jobs = [j for t, path in zip(jobs, job_paths(jobs), strict=True)
                if (j := parse_job(t, path, cfg.calendar, problems))]
    check_unique_names(jobs, problems)
    check_requires(jobs, cfg.jobs, problems)
    check_order_groups(jobs, cfg.jobs, problems)
    overrides = raw.get("overrides", {})
    if not isinstance(overrides, dict):
        problems.add("overrides", "must be a table of calendars ([overrides.XNYS])", overrides)
        overrides = {}
    for cal, table in overrides.items():
        cfg.overrides[cal] = parse_override(table, f"overrides.{cal}", problems)
    cfg.shared = jobidentity.parse_shared(raw.get("shared"), problems)
    jobidentity.check_jobs(jobs, cfg, problems)
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
    cfg.alerts = parse_alerts(raw.get("alerts"), problems)
    if getattr(cfg.alerts, "enabled", False) and isinstance(raw.get("job"), list):
        check_credentials_against_channels(raw["job"], cfg.alerts.credential_owners(), problems)
    cfg.watch = parse_watch(raw.get("watch"), problems)
    cfg.metrics = parse_metrics(raw.get("metrics"), problems)
    cfg.events = events_of_config(raw, problems)

    cfg.cluster = parse_cluster(raw.get("cluster"), problems)
    check_against_jobs(cfg.cluster, cfg.jobs, problems)
