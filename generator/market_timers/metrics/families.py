"""The metrics' families: every metric, from durable state only (collect()): each configured
job's last run, its counters and next fire, the outbox, the calendars' data end, the last sync
and refresh."""

from __future__ import annotations

import contextlib
import math
import platform
from collections import Counter
from datetime import UTC, date, datetime, time
from pathlib import Path

from market_timers import __version__
from market_timers.contracts import planfile
from market_timers.contracts.outcomes import METRIC_KINDS
from market_timers.metrics import scan
from market_timers.metrics.records import (
    epoch_seconds,
    exit_status_number,
    is_finished,
    result_kinds,
    run_kind,
)
from market_timers.metrics.state import State, catch_up
from market_timers.metrics.textformat import Family

OUTBOX_STATES = ("pending", "undeliverable")


def _read_plan(state_dir: Path) -> planfile.PlanDoc:
    """plan.json; an empty plan when sync never ran or the file is unreadable (the metrics of
    everything else are still written)."""
    try:
        doc = planfile.read(state_dir)
    except (OSError, ValueError):
        doc = None
    return doc or planfile.PlanDoc(None, ())


# (name, type, help) of every family, in the order the file lists them.
FAMILIES = (
    ("job_last_start_timestamp_seconds", "gauge",
     "When the job's last run started (the runner's start, just before it ran the job)."),
    ("job_last_end_timestamp_seconds", "gauge",
     "When the job's last run ended (ExecStopPost=); absent while the first run is running."),
    ("job_last_exit_status", "gauge",
     "Exit status of the job's last run; 128 + the signal's number when it was killed."),
    ("job_last_result", "gauge",
     f"1 for the kind of result of the job's last run ({', '.join(METRIC_KINDS)}), 0 for "
     "the others."),
    ("job_last_lateness_seconds", "gauge",
     "How late the job's last run started after its planned instant: the runner's start "
     "after it, 0 for a pre-fired run whose runner was ready before the instant (`lead`: the "
     "job is exec'd at the instant itself, within about a millisecond, bench/fire_lateness)."),
    ("job_last_duration_seconds", "gauge", "How long the job's last run took."),
    ("job_runs_total", "counter",
     "Runs of the job that have ended, whatever their result (refused starts included)."),
    ("job_failures_total", "counter", "Runs of the job that did not succeed, by kind."),
    ("job_sessions_missed_total", "counter",
     "Planned runs with no run at all by their dead-man deadline (instant + grace + timeout "
     "+ slack): the timer did not fire or the runner never started."),
    ("job_next_fire_timestamp_seconds", "gauge",
     "The job's next planned instant (plan.json, written by sync)."),
    ("outbox_alerts", "gauge",
     "Alerts in the durable outbox by channel and state (pending: still being tried; "
     "undeliverable: every channel given up)."),
    ("outbox_oldest_alert_timestamp_seconds", "gauge",
     "When the oldest alert in the outbox in this channel and state was created."),
    ("calendar_data_end_timestamp_seconds", "gauge",
     "00:00 UTC of the last session the installed exchange calendar data knows (sessions "
     "after it are not planned); absent for a calendar whose holidays come from rules "
     "without an end."),
    ("last_sync_timestamp_seconds", "gauge",
     "When sync last changed a unit or the plan (plan.json written; a sync with nothing to "
     "do writes nothing)."),
    ("last_refresh_timestamp_seconds", "gauge", "When the daily refresh last succeeded."),
    ("metrics_generated_timestamp_seconds", "gauge", "When this file was written."),
    ("halted", "gauge",
     "1 for each halt in force (`market-timers halt`): scope orders, all, group or job, and "
     "the group's or job's name."),
    ("build_info", "gauge",
     "Always 1: the versions of market-timers, of the Python that runs it and of "
     "exchange_calendars (its holiday data; as of the last sync) in the labels."),
)


def collect(config, now: datetime, state: State | None = None) -> list[Family]:
    """Every metric, from durable state only (see the package's docstring)."""
    state_dir = Path(config.state_dir)
    state = state or State(state_dir)
    view = scan.read(state)
    plan = _read_plan(state_dir)
    history = catch_up(config, state, view, plan, now)
    try:  # in this order: a writer that dies in between only makes the next one read more
        history.save()
        scan.save(state, view)
    finally:
        history.close()
    f = {name: Family(name, kind, text) for name, kind, text in FAMILIES}
    _job_metrics(f, config, view.last, history.tally, plan, now)
    _outbox(config, f)
    calendars_doc = state.read("calendars.json")
    for cal, last_day in sorted(calendars_doc.get("last_session", {}).items()):
        with contextlib.suppress(ValueError, TypeError):
            day = date.fromisoformat(last_day)
            f["calendar_data_end_timestamp_seconds"].add(
                datetime.combine(day, time(), UTC).timestamp(), calendar=cal)
    f["last_sync_timestamp_seconds"].add(epoch_seconds(plan.generated_utc))
    f["last_refresh_timestamp_seconds"].add(
        epoch_seconds(state.read("refresh.json").get("last_ok_utc")))
    from market_timers.ledger.halts import in_force

    for halt in in_force(config):  # with [cluster], the halts made on any node
        f["halted"].add(1, scope=halt["scope"], name=halt["name"])
    f["metrics_generated_timestamp_seconds"].add(round(now.timestamp(), 3))
    f["build_info"].add(1, version=__version__, python=platform.python_version(),
                        exchange_calendars=str(calendars_doc.get("exchange_calendars")
                                               or "unknown"))
    return list(f.values())


def _job_metrics(f: dict[str, Family], config, last: dict[str, dict],
                 tally: Counter[tuple[str, str]], plan: planfile.PlanDoc, now: datetime) -> None:
    """The job_* families: each configured job's last run, its counters and its next fire."""
    kinds, failure_kinds = result_kinds()
    # The config's jobs only: a job removed from it leaves the file (its history stays, and
    # counts on if it comes back), so the series do not grow for ever.
    configured = {j.name for j in config.jobs}
    jobs = sorted(configured)
    runs, failures, missed = _counts(tally, jobs, failure_kinds)
    next_fire = _next_fires(plan, configured, now)
    # The label is market_job, not job: Prometheus gives its scrape target a `job` label and
    # would rename ours to exported_job.
    for job in jobs:
        rec = last.get(job)
        if rec is not None:
            f["job_last_start_timestamp_seconds"].add(epoch_seconds(rec.get("started_utc")),
                                                      market_job=job)
            f["job_last_end_timestamp_seconds"].add(epoch_seconds(rec.get("finished_utc")),
                                                    market_job=job)
            f["job_last_exit_status"].add(exit_status_number(rec), market_job=job)
            if is_finished(rec):
                kind = run_kind(rec)
                for k in kinds:
                    f["job_last_result"].add(1 if k == kind else 0, market_job=job, kind=k)
            f["job_last_lateness_seconds"].add(_lateness(rec.get("late_sec")), market_job=job)
            f["job_last_duration_seconds"].add(rec.get("duration_sec"), market_job=job)
        f["job_runs_total"].add(runs.get(job, 0), market_job=job)
        for k in failure_kinds:
            f["job_failures_total"].add(failures.get((job, k), 0), market_job=job, kind=k)
        f["job_sessions_missed_total"].add(missed.get(job, 0), market_job=job)
        f["job_next_fire_timestamp_seconds"].add(next_fire.get(job), market_job=job)


def _lateness(late) -> float | None:
    """Against the instant: a runner that started early (pre-fired) waited for it."""
    return max(0.0, float(late)) if isinstance(late, int | float) else None


def _counts(tally: Counter[tuple[str, str]], jobs: list[str],
            failure_kinds) -> tuple[dict, dict, dict]:
    """(runs per job, failures per (job, kind), misses per job) from the history's tallies."""
    runs = {j: 0 for j in jobs}
    failures = {(j, k): 0 for j in jobs for k in failure_kinds}
    missed = {j: 0 for j in jobs}
    for (job, kind), n in tally.items():
        if kind == "missed":
            missed[job] = missed.get(job, 0) + n
            continue
        runs[job] = runs.get(job, 0) + n
        if kind != "ok":
            failures[(job, kind)] = failures.get((job, kind), 0) + n
    return runs, failures, missed


def _next_fires(plan: planfile.PlanDoc, configured: set[str], now: datetime) -> dict[str, float]:
    """job -> its next planned instant after `now` (epoch seconds), from plan.json."""
    next_fire: dict[str, float] = {}
    for entry in plan.entries:
        t, job = entry.instant.timestamp(), entry.job
        if t > now.timestamp() and job in configured:
            next_fire[job] = min(t, next_fire.get(job, math.inf))
    return next_fire


def _outbox(config, f: dict[str, Family]) -> None:
    from market_timers.alerts.outbox import Outbox
    from market_timers.channels import NAMES  # the channel registry: every channel has its series

    count = {(c, s): 0 for c in NAMES for s in OUTBOX_STATES}
    oldest: dict[tuple[str, str], float] = {}
    for alert in Outbox(config.spool_dir).load_all():
        channel = alert.channel or (alert.chain[-1] if alert.chain else "none")
        key = (channel, alert.state if alert.state in OUTBOX_STATES else "pending")
        count[key] = count.get(key, 0) + 1
        created = epoch_seconds(alert.created)
        if created is not None:
            oldest[key] = min(created, oldest.get(key, math.inf))
    for (channel, st), n in sorted(count.items()):
        f["outbox_alerts"].add(n, channel=channel, state=st)
    for (channel, st), t in sorted(oldest.items()):
        f["outbox_oldest_alert_timestamp_seconds"].add(t, channel=channel, state=st)
