"""Metrics for Prometheus: `market_timers.prom` for node_exporter's textfile collector.

Written after every run (the runner's ExecStopPost= `--record`), sync, refresh and dead-man pass,
and only when the file's directory exists (`[metrics] textfile`). Several processes do this, so
the file is never patched: each writer takes `<state_dir>/metrics/lock` and regenerates the whole
file from durable state, then renames it into place (a scrape never sees half a file):

* the run ledger (scan.read: every attempt and refused start in the key directories that changed
  since the previous writer's scan, plus the records of runs from before the ledger; what the
  others hold, each job's last run, is kept in `metrics/scan.json`): each job's last run;
* `metrics/history.jsonl`, append-only: one line per finished run (by systemd invocation) and per
  missed session. Counters must never go down, and a run record is replaced when a session is
  re-run, so the counters are counted from this history, which the writer brings up to date from
  the run records and the plan (under the lock) before it counts (state.catch_up); its tallies are
  kept in `metrics/counts.json`, so only its new lines are parsed (history.py);
* plan.json (the next fire per job; a planned fire past its dead-man deadline without a run record
  is a missed session), the outbox directory, and two small files sync and refresh leave here
  (`metrics/calendars.json`: the last session of each calendar's data; `metrics/refresh.json`).

This module is the door: the hooks (after_run, after_sync, after_refresh, after_deadman, one call
each from the runner's --record, sync, refresh and the dead-man pass) and update(), which writes
the file. Behind it: textformat.py (the text format), records.py (what a run record says),
scan.py (the ledger, read incrementally), history.py (the counted history), state.py (the
metrics' own files, catch_up()), families.py (collect(): every metric).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, date, datetime
from pathlib import Path

from market_timers.config.metrics import metrics_of
from market_timers.files import atomicfile
from market_timers.metrics.families import FAMILIES, OUTBOX_STATES, collect
from market_timers.metrics.records import exit_status_number, run_kind
from market_timers.metrics.state import SUBDIR, State, catch_up
from market_timers.metrics.textformat import PREFIX, Family, render

__all__ = [
    "FAMILIES", "OUTBOX_STATES", "PREFIX", "SUBDIR", "Family", "State", "after_deadman",
    "after_refresh", "after_run", "after_sync", "catch_up", "collect", "directory_exists",
    "exit_status_number", "render", "run_kind", "update", "wanted",
]

log = logging.getLogger("market_timers.metrics")


# writing the file -------------------------------------------------------------------------------

def directory_exists(path: str) -> bool:
    return os.path.isdir(path)


def wanted(config) -> bool:
    """Metrics on, and the textfile's directory there (node_exporter installed)."""
    metrics = metrics_of(config)
    return metrics.enabled and directory_exists(metrics.directory)


def update(config, now: datetime | None = None, *, calendars: dict[str, date] | None = None,
           refreshed: bool = False, calendar_version: str | None = None) -> Path | None:
    """Regenerate the textfile (the path, or None when metrics are off or its directory is
    missing). `calendars` (from sync) and `refreshed` (from refresh) are recorded first."""
    if not wanted(config):
        return None
    metrics = metrics_of(config)
    now = now or datetime.now(UTC)
    target = Path(metrics.textfile)

    def write() -> None:
        state = State(config.state_dir)
        with state.lock():
            if calendars is not None:
                state.write("calendars.json", {"last_session": {
                    k: v.isoformat() for k, v in sorted(calendars.items())},
                    "exchange_calendars": calendar_version})
            if refreshed:
                state.write("refresh.json", {"last_ok_utc": now.strftime("%Y-%m-%dT%H:%M:%SZ")})
            atomicfile.write(target, render(collect(config, now, state)), mode=0o644,
                             sync=atomicfile.DURABLE)

    _as_state_owner(Path(config.state_dir), write)
    return target


def _as_state_owner(state_dir: Path, fn) -> None:
    """Run fn as the owner of the state directory when we are root (sync and refresh are): the
    metrics' files stay the package user's, who writes them after every run, and a symlink a job
    (that same user) planted under the state directory gains it nothing."""
    try:
        st = state_dir.stat()
    except FileNotFoundError:
        st = None
    if os.geteuid() != 0 or st is None or st.st_uid == 0:
        fn()
        return
    from market_timers.alerts.privileges import run_as

    def failed(e: BaseException) -> None:
        log.warning("metrics: cannot write as uid %d: %s: %s", st.st_uid, type(e).__name__, e)

    status = run_as(st.st_uid, st.st_gid, fn, on_error=failed)
    if status:
        raise OSError(f"writing the metrics as uid {st.st_uid} failed (status {status})")


# the hooks: one call each from the runner's --record, sync, refresh and the deadman ------------

def _safely(what: str, fn) -> Path | None:
    """A metrics problem is logged; it never fails the run, sync or pass that called it."""
    try:
        return fn()
    except Exception as e:
        log.warning("metrics: could not update the textfile after %s: %s: %s", what,
                    type(e).__name__, e)
        return None


def after_run(env: dict) -> Path | None:
    """From `market-timers-run --record` (ExecStopPost=): loads the config itself."""
    from market_timers.config import loader as config_mod
    from market_timers.schema.problems import ConfigError

    def go() -> Path | None:
        try:
            cfg = config_mod.load(config_mod.config_path(None))
        except ConfigError as e:
            log.info("metrics: not updated, the config does not load: %s", e)
            return None
        return update(cfg)

    return _safely(f"the run of {env.get('MARKET_JOB', '?')}", go)


def after_sync(config, now: datetime | None = None) -> Path | None:
    """From sync: also records each calendar's last session (sync has the calendars loaded)."""
    def go() -> Path | None:
        if not wanted(config):
            return None
        from market_timers.schedule import calendars

        ends = {}
        for name in {calendars.resolve(c) for j in config.jobs if j.is_session_job
                     for c in j.all_calendars}:
            try:
                if (last := calendars.last_session(name)) is not None:  # None: rules, no end
                    ends[name] = last
            except Exception as e:  # one calendar's data must not hide the others'
                log.warning("metrics: no data end for calendar %s: %s", name, e)
        return update(config, now, calendars=ends, calendar_version=calendars.version())

    return _safely("sync", go)


def after_refresh(config, now: datetime | None = None) -> Path | None:
    return _safely("the refresh", lambda: update(config, now, refreshed=True))


def after_control(config, now: datetime | None = None) -> Path | None:
    """From `market-timers halt` and `resume`: the halts in force (market_timers_halted)."""
    return _safely("the halt or resume", lambda: update(config, now))


def after_deadman(config, now: datetime | None = None) -> Path | None:
    return _safely("the dead-man pass", lambda: update(config, now))

