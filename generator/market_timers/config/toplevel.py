"""The top-level keys of market-timers.toml (TOP): the default calendar, the horizon, the users
and directories, `on_halt`, and the names of the tables each parsed by its own module.
"""

from __future__ import annotations

from pathlib import Path

from market_timers.config.jobchecks import USER_NAME, command_argv, job_user
from market_timers.contracts import environment
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import absolute_path, text, whole


def _runner(value: object) -> str:
    value = text(value)
    if not value.startswith("/"):
        raise Bad("must be an absolute path")
    return value


def _operator_group(value: object) -> str:
    """`operator_group`: besides root, its members may pause and resume (controls/access.py).
    Never the package's own group nor the jobs' default user's: a job must not be able to."""
    if not isinstance(value, str) or not USER_NAME.match(value):
        raise Bad("must be a group name: a letter or _, then letters, digits, _ or - (at most 31 "
                  "characters)")
    if value in ("root", environment.PACKAGE_USER, environment.DEFAULT_JOB_USER):
        raise Bad(f"the group {value} holds the scheduler's or the jobs' own user: a job could "
                  "pause and resume; make a group of the operators only (e.g. market-ops)")
    return value


def _on_halt(value: object) -> list[str]:
    """`on_halt`: the command a halt runs once (the firm's cancel-all), checked like a job's."""
    if isinstance(value, list) and not value:
        raise Bad("an empty array: leave the key out to run nothing on a halt")
    return command_argv(value)


def _directory(value: object) -> Path:
    return Path(absolute_path(value))


def _section(name: str, doc: str) -> Key:
    """A key whose value is a table (or array of tables) of its own, parsed by its module."""
    return Key(name, None, None, doc)


TOP = Table((
    Key("calendar", text, None, "the exchange calendar of every job that names none"),
    # 3: the daily refresh tops it up; two failed refreshes in a row still leave timers, and each
    # one alerts. Each session more costs PID 1 two units per job (docs/sizing.md).
    Key("horizon", whole(1, 250), 3, "sessions ahead that have timers"),
    Key("retention_days", whole(0, 366), 7, "days of run records and logs kept"),
    Key("user", job_user, "", "the user every job runs as (default: each job a user of its "
        "own, market-job-<name>)"),
    Key("runner", _runner, None, "the runner's absolute path"),
    Key("operator_group", _operator_group, "", "the group whose members may pause and resume"),
    Key("on_halt", _on_halt, [], "the absolute program, then its arguments, that a halt runs "
        "once (e.g. the firm's cancel-all)"),
    Key("unit_dir", _directory, Path("/etc/systemd/system"), "where the units are written"),
    Key("state_dir", _directory, Path(environment.DEFAULT_STATE_DIR), "the state directory"),
    Key("spool_dir", _directory, Path(environment.DEFAULT_SPOOL_DIR), "the alert spool"),
    Key("page_dir", _directory, Path(environment.DEFAULT_PAGE_DIR),
        "where each dead-man pass writes status.html, for a web server to serve"),
    Key("runtime_dir", _directory, Path(environment.DEFAULT_RUNTIME_DIR),
        "the runtime directory"),
    _section("job", "[[job]]: the jobs (config/jobs.py)"),
    _section("shared", "[shared]: directories jobs share (config/jobidentity.py)"),
    _section("overrides", "[overrides.<calendar>]: what the exchange announced"),
    _section("alerts", "[alerts] (config/alerts.py)"),
    _section("watch", "[watch] (config/watch.py)"),
    _section("events", "[events] (config/events.py)"),
    _section("cluster", "[cluster] (config/cluster.py)"),
    _section("metrics", "[metrics] (config/metrics.py)"),
))
TOP_KEYS = set(TOP.names)
