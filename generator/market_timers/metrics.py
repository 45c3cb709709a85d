"""Metrics for Prometheus: `market_timers.prom` for node_exporter's textfile collector.

Written after every run (the runner's ExecStopPost= `--record`), sync, refresh and dead-man pass,
and only when the file's directory exists (`[metrics] textfile`). Several processes do this, so
the file is never patched: each writer takes `<state_dir>/metrics/lock` and regenerates the whole
file from durable state, then renames it into place (a scrape never sees half a file):

* the run ledger (ledger_runs: every attempt and refused start, plus the records of runs from
  before the ledger): each job's last run;
* `metrics/history.jsonl`, append-only: one line per finished run (by systemd invocation) and per
  missed session. Counters must never go down, and a run record is replaced when a session is
  re-run, so the counters are counted from this history, which the writer brings up to date from
  the run records and the plan (under the lock) before it counts;
* plan.json (the next fire per job; a planned fire past its dead-man deadline without a run record
  is a missed session), the outbox directory, and two small files sync and refresh leave here
  (`metrics/calendars.json`: the last session of each calendar's data; `metrics/refresh.json`).

The text format is written by hand (about 30 lines) rather than with prometheus_client: the
runner's ExecStopPost= runs this after every job, the format is small and fixed, and a runtime
dependency would have to be pinned and shipped in the package for it. The tests parse the output
with prometheus_client's own parser.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path

from . import atomicfile, planfile, runrecord
from .metrics_config import metrics_of

log = logging.getLogger("market_timers.metrics")

PREFIX = "market_timers_"
SUBDIR = "metrics"
OUTBOX_STATES = ("pending", "undeliverable")


# the text format ---------------------------------------------------------------------------------

@dataclass
class Family:
    name: str  # without the prefix
    type: str  # gauge | counter
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float | None, **labels: str) -> None:
        if value is not None:
            self.samples.append((labels, float(value)))


def _escape_label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def render(families: list[Family]) -> str:
    """The Prometheus text exposition format 0.0.4 (what node_exporter's textfile collector
    reads): HELP and TYPE once per family, then its samples, under the same name (a counter's
    name, `_total` included, as in the classic format; OpenMetrics would drop it)."""
    out = []
    for fam in families:
        full = PREFIX + fam.name
        out.append(f"# HELP {full} {_escape_help(fam.help)}")
        out.append(f"# TYPE {full} {fam.type}")
        for labels, value in fam.samples:
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
            out.append(f"{full}{{{text}}} {_number(value)}" if text else f"{full} {_number(value)}")
    return "\n".join(out) + "\n"


# what a run record says ---------------------------------------------------------------------------

def _kinds() -> tuple[tuple[str, ...], tuple[str, ...]]:
    from .alerts.classify import FAILURE_KINDS

    failures = (*FAILURE_KINDS, "overlap-skipped")
    return ("ok", *failures), failures


def run_kind(record: dict) -> str:
    """ok, one of the alert layer's failure kinds, or overlap-skipped."""
    from .alerts.classify import classify

    refused = record.get("refused")
    if refused in ("stale-start", "overlap-skipped") and not record.get("exit_status"):
        return refused
    return classify(str(record.get("result") or ""), str(record.get("exit_code") or ""),
                    str(record.get("exit_status") or ""))


def exit_status_number(record: dict) -> int | None:
    """$EXIT_STATUS as a number: the exit status, or 128 + the signal's number (shell style)."""
    status = str(record.get("exit_status") or "").strip()
    if status.isdigit():
        return int(status)
    if status:
        name = status if status.startswith("SIG") else f"SIG{status}"
        with contextlib.suppress(KeyError):
            return 128 + signal.Signals[name].value
    return None


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _is_finished(record: dict) -> bool:
    return bool(record.get("finished_utc"))


def _run_key(record: dict) -> str:
    return record.get("invocation") or (
        f"{record['job']}|{record['session']}|{record.get('started_utc', '')}|"
        f"{record.get('attempt') or record.get('refused') or ''}")


def ledger_runs(state_dir: Path) -> list[dict]:
    """Every start in the run ledger, attempts and refused starts alike (a forced re-run is
    attempt 2 of its session, a refused start a note beside the attempt), plus the records of
    runs from before the ledger."""
    from .ledger.local import LocalLedger

    book = LocalLedger(os.fspath(state_dir))
    out, seen = [], set()
    for key in book.keys():
        seen.add((key.job, key.session))
        try:
            entries = book.attempts(key) + book.refusals(key)
        except OSError:
            continue
        out += [{**e, "job": key.job, "session": key.session} for e in entries]
    out += [r for r in runrecord.all_records(state_dir)
            if (r["job"], r["session"]) not in seen]
    return out


# durable state ----------------------------------------------------------------------------------

class State:
    """The metrics' own files under <state_dir>/metrics/."""

    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / SUBDIR

    def lock(self) -> atomicfile.flock:
        from .safefs import lock

        return lock(self.dir / "lock", base=self.state_dir)

    def history(self) -> list[dict]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for line in (self.dir / "history.jsonl").read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict) and entry.get("key") and entry.get("job"):
                        out.append(entry)
        return out

    def append_history(self, entries: list[dict]) -> None:
        if not entries:
            return
        data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries).encode()
        fd = os.open(self.dir / "history.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, name: str) -> dict:
        try:
            doc = json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def write(self, name: str, doc: dict) -> None:
        atomicfile.write(self.dir / name, json.dumps(doc, indent=1, sort_keys=True) + "\n",
                         mode=0o640, sync=atomicfile.DURABLE)


def _read_plan(state_dir: Path) -> planfile.PlanDoc:
    """plan.json; an empty plan when sync never ran or the file is unreadable (the metrics of
    everything else are still written)."""
    try:
        doc = planfile.read(state_dir)
    except (OSError, ValueError):
        doc = None
    return doc or planfile.PlanDoc(None, ())


def catch_up(config, state: State, records: list[dict], plan: planfile.PlanDoc,
             now: datetime) -> None:
    """Append to the history what it does not have yet: finished runs, sessions now missed."""
    from .watch.config import watch_of
    from .watch.fires import deadline

    known = {e["key"] for e in state.history()}
    new = []
    for rec in records:
        if _is_finished(rec) and (key := _run_key(rec)) not in known:
            known.add(key)
            new.append({"key": key, "job": rec["job"], "session": rec["session"],
                        "kind": run_kind(rec), "finished_utc": rec.get("finished_utc")})
    ran = {(r["job"], r["session"]) for r in records}
    jobs = {j.name for j in config.jobs}
    slack = watch_of(config).slack_sec
    for entry in plan.entries:
        pair = entry.key
        key = f"missed|{pair[0]}|{pair[1]}"
        if pair[0] not in jobs or pair in ran or key in known:
            continue
        with contextlib.suppress(KeyError, ValueError):
            if deadline(entry.json, slack) < now:
                known.add(key)
                new.append({"key": key, "job": pair[0], "session": pair[1], "kind": "missed",
                            "fire_utc": entry.fire_utc})
    state.append_history(new)


# the metrics -----------------------------------------------------------------------------------

# (name, type, help) of every family, in the order the file lists them.
FAMILIES = (
    ("job_last_start_timestamp_seconds", "gauge",
     "When the job's last run started (the runner's start, just before it ran the job)."),
    ("job_last_end_timestamp_seconds", "gauge",
     "When the job's last run ended (ExecStopPost=); absent while the first run is running."),
    ("job_last_exit_status", "gauge",
     "Exit status of the job's last run; 128 + the signal's number when it was killed."),
    ("job_last_result", "gauge",
     "1 for the kind of result of the job's last run (ok, failed, killed, watchdog, "
     "timeout, stale-start, runner-error, overlap-skipped), 0 for the others."),
    ("job_last_lateness_seconds", "gauge",
     "How late the runner started the job's last run after its planned instant; negative "
     "for a pre-fired run (`lead`: it started early and waited for the instant)."),
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
    ("last_sync_timestamp_seconds", "gauge", "When sync last succeeded (plan.json written)."),
    ("last_refresh_timestamp_seconds", "gauge", "When the daily refresh last succeeded."),
    ("metrics_generated_timestamp_seconds", "gauge", "When this file was written."),
)


def collect(config, now: datetime, state: State | None = None) -> list[Family]:
    """Every metric, from durable state only (see the module's docstring)."""
    state_dir = Path(config.state_dir)
    state = state or State(state_dir)
    records = ledger_runs(state_dir)
    plan = _read_plan(state_dir)
    catch_up(config, state, records, plan, now)
    f = {name: Family(name, kind, text) for name, kind, text in FAMILIES}
    _job_metrics(f, config, records, state.history(), plan, now)
    _outbox(config, f)
    for cal, last_day in sorted(state.read("calendars.json").get("last_session", {}).items()):
        with contextlib.suppress(ValueError, TypeError):
            day = date.fromisoformat(last_day)
            f["calendar_data_end_timestamp_seconds"].add(
                datetime.combine(day, time(), UTC).timestamp(), calendar=cal)
    f["last_sync_timestamp_seconds"].add(_seconds(plan.generated_utc))
    f["last_refresh_timestamp_seconds"].add(_seconds(state.read("refresh.json").get("last_ok_utc")))
    f["metrics_generated_timestamp_seconds"].add(round(now.timestamp(), 3))
    return list(f.values())


def _job_metrics(f: dict[str, Family], config, records: list[dict], history: list[dict],
                 plan: planfile.PlanDoc, now: datetime) -> None:
    """The job_* families: each configured job's last run, its counters and its next fire."""
    kinds, failure_kinds = _kinds()
    # The config's jobs only: a job removed from it leaves the file (its history stays, and
    # counts on if it comes back), so the series do not grow for ever.
    configured = {j.name for j in config.jobs}
    jobs = sorted(configured)
    last = _last_runs(records)
    runs, failures, missed = _counts(history, jobs, failure_kinds)
    next_fire = _next_fires(plan, configured, now)
    # The label is market_job, not job: Prometheus gives its scrape target a `job` label and
    # would rename ours to exported_job.
    for job in jobs:
        rec = last.get(job)
        if rec is not None:
            f["job_last_start_timestamp_seconds"].add(_seconds(rec.get("started_utc")),
                                                      market_job=job)
            f["job_last_end_timestamp_seconds"].add(_seconds(rec.get("finished_utc")),
                                                    market_job=job)
            f["job_last_exit_status"].add(exit_status_number(rec), market_job=job)
            if _is_finished(rec):
                kind = run_kind(rec)
                for k in kinds:
                    f["job_last_result"].add(1 if k == kind else 0, market_job=job, kind=k)
            f["job_last_lateness_seconds"].add(rec.get("late_sec"), market_job=job)
            f["job_last_duration_seconds"].add(rec.get("duration_sec"), market_job=job)
        f["job_runs_total"].add(runs.get(job, 0), market_job=job)
        for k in failure_kinds:
            f["job_failures_total"].add(failures.get((job, k), 0), market_job=job, kind=k)
        f["job_sessions_missed_total"].add(missed.get(job, 0), market_job=job)
        f["job_next_fire_timestamp_seconds"].add(next_fire.get(job), market_job=job)


def _last_runs(records: list[dict]) -> dict[str, dict]:
    """job -> its record with the latest start."""
    last: dict[str, dict] = {}
    for rec in records:
        when = rec.get("started_utc") or ""
        if rec["job"] not in last or when >= (last[rec["job"]].get("started_utc") or ""):
            last[rec["job"]] = rec
    return last


def _counts(history: list[dict], jobs: list[str], failure_kinds) -> tuple[dict, dict, dict]:
    """(runs per job, failures per (job, kind), misses per job) from the counted history."""
    runs = {j: 0 for j in jobs}
    failures = {(j, k): 0 for j in jobs for k in failure_kinds}
    missed = {j: 0 for j in jobs}
    for entry in history:
        job, kind = entry["job"], entry.get("kind", "")
        if kind == "missed":
            missed[job] = missed.get(job, 0) + 1
            continue
        runs[job] = runs.get(job, 0) + 1
        if kind != "ok":
            failures[(job, kind)] = failures.get((job, kind), 0) + 1
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
    from .alerts.channels import NAMES  # the channel registry: every channel has its series
    from .alerts.outbox import Outbox

    count = {(c, s): 0 for c in NAMES for s in OUTBOX_STATES}
    oldest: dict[tuple[str, str], float] = {}
    for alert in Outbox(config.spool_dir).load_all():
        channel = alert.channel or (alert.chain[-1] if alert.chain else "none")
        key = (channel, alert.state if alert.state in OUTBOX_STATES else "pending")
        count[key] = count.get(key, 0) + 1
        created = _seconds(alert.created)
        if created is not None:
            oldest[key] = min(created, oldest.get(key, math.inf))
    for (channel, st), n in sorted(count.items()):
        f["outbox_alerts"].add(n, channel=channel, state=st)
    for (channel, st), t in sorted(oldest.items()):
        f["outbox_oldest_alert_timestamp_seconds"].add(t, channel=channel, state=st)


# writing the file -------------------------------------------------------------------------------

def directory_exists(path: str) -> bool:
    return os.path.isdir(path)


def wanted(config) -> bool:
    """Metrics on, and the textfile's directory there (node_exporter installed)."""
    metrics = metrics_of(config)
    return metrics.enabled and directory_exists(metrics.directory)


def update(config, now: datetime | None = None, *, calendars: dict[str, date] | None = None,
           refreshed: bool = False) -> Path | None:
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
                    k: v.isoformat() for k, v in sorted(calendars.items())}})
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
    from .privileges import run_as

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
    from . import config as config_mod
    from .errors import ConfigError

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
        from . import calendars

        ends = {}
        for name in {calendars.resolve(j.calendar) for j in config.jobs if j.is_session_job}:
            try:
                if (last := calendars.last_session(name)) is not None:  # None: rules, no end
                    ends[name] = last
            except Exception as e:  # one calendar's data must not hide the others'
                log.warning("metrics: no data end for calendar %s: %s", name, e)
        return update(config, now, calendars=ends)

    return _safely("sync", go)


def after_refresh(config, now: datetime | None = None) -> Path | None:
    return _safely("the refresh", lambda: update(config, now, refreshed=True))


def after_deadman(config, now: datetime | None = None) -> Path | None:
    return _safely("the dead-man pass", lambda: update(config, now))

