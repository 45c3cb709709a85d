"""What happened to a start or a run: the one table of outcomes, and what is read from it.

Each outcome is one row of OUTCOMES, like systemd's table of exit statuses: its name (the kind the
ledger notes for a refused start, the alert kind, the metric label), the runner's exit status for
it, how it stands for the promise (claims the session or not; ran, refused or missed for the
dead-man and `requires`), its alert (default severity and title), its cell on the status page,
its place in the metrics and the digest, and the man page's line for it. The exit codes
(exitcodes.py), `classify`, the titles, `result_text`, the alert kinds and their default
severities (config/alerts.py), the status text, the page's states and legend (watch/), the digest
(alerts/digest.py) and the metrics' labels (metrics/) are all read from it: a new outcome is one
row (tests/contracts/test_outcomes.py shows it). tests/project/test_docs.py holds the man pages' EXIT STATUS to it.

The runner imports this module (through exitcodes.py): standard library only, and cheap to import
(a namedtuple, not a dataclass: `dataclasses` alone costs the runner's start tens of ms).

MONITOR_SERVICE_RESULT is the unit's Result: `exit-code` (then MONITOR_EXIT_STATUS is the status:
one of the runner's 170-179 below, or the job's own), `signal` / `core-dump` (killed:
MONITOR_EXIT_STATUS is the signal name), `watchdog` (hang: killed with SIGABRT), `timeout`
(RuntimeMaxSec), `oom-kill`, and a few start-up failures. A success handler still checks the
status in case 170/171 were declared SuccessExitStatus=. A status 170-179 is the runner's only
when the runner says so: the record step writes the runner's own account of the ending to the
ledger (runner/record.py), and a run the runner did not refuse is classified with `ran` (a job's
own exit 178 is "failed"; a job killed by SIGTERM is "killed", though the supervisor exits 143).
"""

from __future__ import annotations

from collections import namedtuple

# How the dead-man and `requires` count an outcome.
RAN = "ran"  # the job ran (whatever its result): the session is not missed
REFUSED = "refused"  # the start was refused and noted: not run, not missed
MISSED = "missed"  # nothing ran by the deadline

_FIELDS = {
    "name": None,  # the kind: the ledger's `refused`, the alert kind, the metric label
    "exit": None,  # the runner's exit status for it; None: not the runner's (the job's own...)
    "brief": "",  # a few words for a person: `status`'s text, the legend, the man page's tag
    "claims": False,  # it holds the session's claim: a later start is refused (already-ran)
    "counts": REFUSED,  # RAN, REFUSED or MISSED: what the dead-man and `requires` make of it
    "severity": None,  # default [alerts.kind_severity]: "job" or a severity; None: no alert
    "title": "",  # the alert's title ({job}, {session}, {status})
    "page": "failed",  # its state on the status page (PAGE_STATES)
    "metric": False,  # a label of the job_last_result / job_failures_total metrics
    "failure": False,  # a failure: a recovery follows, pause_on_failure pauses, PagerDuty's key
    "results": (),  # the systemd Results that are this outcome (MONITOR_SERVICE_RESULT)
    "reported_as": None,  # the row it is told as: its exit status is not classified on its own
    "tally": None,  # the digest's count of it ("Skips: 1, stale starts: 0...")
    "held": None,  # the digest's line naming the jobs it held ("Paused (not run, not missed)")
    "fields": (),  # the refusal's own fields in the ledger that `status` shows
    "said": None,  # `status`'s text when the first field in it is there
    "explain": "",  # the man page's line for it (market-timers-run(1), EXIT STATUS)
}


class Outcome(namedtuple("Outcome", list(_FIELDS), defaults=list(_FIELDS.values())[1:])):
    """One row of the outcome table (see the module's docstring; _FIELDS says each field)."""

    __slots__ = ()


OUTCOMES = (
    Outcome("ok", claims=True, counts=RAN, page="ok", metric=True, results=("success",),
            brief="succeeded"),
    Outcome("failed", claims=True, counts=RAN, severity="job", metric=True, failure=True,
            title="{job} failed with exit status {status}", brief="exit status"),
    Outcome("killed", claims=True, counts=RAN, severity="job", metric=True, failure=True,
            title="{job} was killed by signal {status}", brief="signal",
            results=("signal", "core-dump", "oom-kill")),
    Outcome("watchdog", claims=True, counts=RAN, severity="job", metric=True, failure=True,
            title="{job} hung: killed by the watchdog", brief="watchdog",
            results=("watchdog",)),
    Outcome("timeout", claims=True, counts=RAN, severity="job", metric=True, failure=True,
            title="{job} ran past its time limit and was stopped", brief="timeout",
            results=("timeout",)),
    Outcome("overlap-skipped", exit=171, severity="warning", page="refused", metric=True,
            title="{job} skipped: the previous run still holds its lock", tally="skips",
            brief="overlap skipped", explain="the lock group was busy; the run was dropped."),
    Outcome("stale-start", exit=170, severity="job", page="refused", metric=True, failure=True,
            title="{job} started too late and did not run (stale start)", tally="stale starts",
            brief="stale start",
            explain="later than the grace, or (cluster mode) the ledger was busy or did not "
                    "answer until the instant plus the grace; the job did not run."),
    # Most runner errors come before the claim; an exec that fails after it keeps the claim.
    Outcome("runner-error", exit=172, severity="job", page="refused", metric=True, failure=True,
            title="{job} could not be started by the runner", brief="runner error",
            results=("resources", "start-limit-hit", "exec-condition"),
            explain="the command could not be executed, the context is missing, the lock "
                    "could not be taken"),
    Outcome("already-ran", exit=173, severity="warning", page="refused",
            title="{job} already ran for session {session}: this second start was refused",
            brief="already ran",
            explain="the run ledger says this (job, session) already started; the job did not "
                    "run again."),
    # A restart after the last attempt: the handler tells the last attempt's own outcome.
    Outcome("retries-over", exit=174, reported_as="failed", brief="retries over",
            explain="a restart after the job's last allowed attempt; nothing ran."),
    Outcome("ledger-unreachable", exit=175, severity="critical", page="refused", metric=True,
            failure=True, brief="ledger unreachable",
            title="{job} did not run for session {session}: the cluster ledger (PostgreSQL) "
                  "could not be used (unreachable, this node's login refused, or it failed)",
            explain="in cluster mode the PostgreSQL run ledger could not be used: no connection "
                    "could be made (or its DSN credential read) and on_db_unreachable is skip "
                    "or the job is an order job (never run outside the ledger), or this "
                    "node's login was refused (a configuration error), or the reached ledger "
                    "failed"),
    Outcome("clock-skew", exit=179, severity="critical", page="refused", metric=True,
            failure=True, brief="clock skew",
            title="{job} did not run for session {session} on this node: its clock disagrees "
                  "with the cluster ledger's (max_clock_skew_ms)",
            explain="on the cluster ledger, this node's clock is more than "
                    "MARKET_MAX_CLOCK_SKEW_MS off the ledger's"),
    Outcome("paused", exit=177, severity="info", page="paused", brief="paused",
            title="{job} is paused: session {session} did not run",
            held="Paused (not run, not missed)", fields=("scope", "note"), said="paused ({note})",
            explain="the job or its lock group is paused"),
    # No alert: the halt's own alert (market-timers halt) said it, once, not at each start.
    Outcome("halted", exit=178, page="halted", brief="halted",
            title="{job} is halted (market-timers halt): session {session} did not run",
            held="Halted (not run, not missed)", fields=("scope", "reason"),
            said="halted ({reason})", explain="a halt covers the job"),
    Outcome("requires-unmet", exit=176, severity="job", page="refused", metric=True,
            title="{job} did not run for session {session}: a job it requires did not succeed",
            brief="requires unmet", held="Not run, a job they require did not succeed",
            fields=("upstream", "upstream_state"),
            said="requires unmet: {upstream} {upstream_state}",
            explain="a job named in MARKET_REQUIRES did not succeed in this session"),
    Outcome("missed", counts=MISSED, severity="job", page="missed", tally="misses",
            title="{job} did not run for session {session}", brief="missed"),
)

# Alert kinds that are no outcome of a start or a run: (name, default severity, title).
OTHER_ALERTS = (
    ("not-scheduled", "job", "{job}: no timer is scheduled for session {session}"),
    ("calendar-changed", "warning", "calendar changed"),
    ("recovery", None, "{job} recovered: session {session} ran fine"),  # the failure's severity
    ("halt-watch-stale", "critical", "this node's halt-watch has stopped looking at the halts"),
    # The job units' end records (contracts/endrecord.py): one unreadable, or none taken.
    ("end-record-bad", "critical", "a job's run ending could not be read"),
    ("alert-handler-stuck", "critical", "the alert handler is stuck: run endings are waiting"),
)

# The status page's cell states: (name, colour, the legend's words), in the legend's order;
# "{outcomes}" in the words is the briefs of the outcomes shown in that state.
PAGE_STATES = (
    ("ok", "#d7f5dd", "ran and succeeded"),
    ("skipped", "#eef7c8", "ran, some periodic slots skipped"),
    ("failed", "#f9c7c7", "ran and failed ({outcomes})"),
    ("refused", "#fde3c2", "start refused ({outcomes})"),
    ("missed", "#e88c8c", "did not run by its deadline"),
    ("paused", "#dcd3f2", "held by market-timers pause (not run, not missed)"),
    ("halted", "#f4b6b6", "refused by market-timers halt, the kill switch (not run, not missed)"),
    ("running", "#c9defa", "running now"),
    ("due", "#fff3b0", "past its instant, inside grace + timeout"),
    ("scheduled", "#eeeeee", "planned, instant ahead"),
)

BY_NAME = {o.name: o for o in OUTCOMES}
EXIT = {o.name: o.exit for o in OUTCOMES if o.exit is not None}  # name -> the runner's status
_RUNNER = [o for o in OUTCOMES if o.exit is not None and not o.reported_as]  # classified by exit
_BY_EXIT = {o.exit: o.name for o in _RUNNER}
_BY_RESULT = {r: o.name for o in OUTCOMES for r in o.results}
_RUNNER_EXITS = {o.exit: o.brief for o in _RUNNER}

FAILURE_KINDS = tuple(o.name for o in OUTCOMES if o.failure)
# ok first, then the failures, then the other labelled outcomes (overlap-skipped...).
METRIC_KINDS = ("ok", *FAILURE_KINDS,
                *(o.name for o in OUTCOMES if o.metric and o.name != "ok" and not o.failure))
ALERT_KINDS = (*(o.name for o in OUTCOMES if o.severity), *(a[0] for a in OTHER_ALERTS))
DEFAULT_SEVERITY = {**{o.name: o.severity for o in OUTCOMES if o.severity},
                    **{name: sev for name, sev, _ in OTHER_ALERTS if sev}}
TITLES = {**{o.name: o.title for o in OUTCOMES if o.title},
          **{name: text for name, _, text in OTHER_ALERTS}}
OUTCOME_OF = {**{k: "failed" for k in FAILURE_KINDS},  # the alert layer's last outcome of a job
              **{o.name: "missed" for o in OUTCOMES if o.counts == MISSED}}


def classify(result: str, exit_code: str, exit_status: str, success: bool = False,
             ran: bool = False) -> str:
    """The outcome's name for what systemd says of a run (MONITOR_*): the runner's own exit
    status first (even a success: 170/171 may be SuccessExitStatus=), then the unit's Result.
    `ran`: the runner's account says the job ran (the ledger's attempt, runner/record.py), so the
    status is the job's own: its exit 178 is a failure, never a halt."""
    status = exit_status.strip()
    if not ran and status.isdigit() and int(status) in _BY_EXIT:
        return _BY_EXIT[int(status)]
    if success:
        return "ok"
    kind = _BY_RESULT.get(result, "failed")
    if exit_code in ("killed", "dumped") and kind in ("failed", "runner-error"):
        return "killed"  # a signal, whatever the Result says of how it started
    return kind


def title(kind: str, job: str, session: str = "", status: str = "", result: str = "") -> str:
    if kind == "failed" and not status:
        return f"{job or '?'} failed"
    if kind == "killed" and result == "oom-kill":
        return f"{job} was killed by the OOM killer"
    return TITLES.get(kind, "{job}: " + kind).format(job=job or "?", session=session or "?",
                                                     status=status or "?")


def ledger_refusal_title(job: str, session: str, orders: bool, on_db_unreachable: str) -> str:
    """The title of a refusal 175 true of its job (the unit's MARKET_ORDERS and
    MARKET_ON_DB_UNREACHABLE; the runner's reason is in the journal): an order job is refused
    for any fault of the ledger; a job with on_db_unreachable = run only for a login refused or
    a reached ledger failing; one with skip for those or an unreachable ledger."""
    head = f"{job} did not run for session {session}: "
    if orders:
        return head + ("an order job never runs outside the cluster ledger (PostgreSQL), which "
                       "could not be used (unreachable, this node's login refused, or it failed)")
    if on_db_unreachable == "run":
        return head + ("the cluster ledger (PostgreSQL) refused this node's login or failed "
                       "(on_db_unreachable = run is only for a database that cannot be reached)")
    return head + ("the cluster ledger (PostgreSQL) cannot be reached (on_db_unreachable = skip), "
                   "or it refused this node's login or failed")


_SYSTEMD_RESULTS = {  # a failed run's systemd Result in words ({signal}: the signal or "a signal")
    "signal": "killed ({signal})",
    "core-dump": "killed ({signal}, core dumped)",
    "oom-kill": "killed (out of memory)",
    "watchdog": "hung (killed by the watchdog)",
    "timeout": "timed out (past its time limit)",
    "resources": "not started (resources: see its journal)",
    "start-limit-hit": "not started (start limit hit)",
    "exec-condition": "not started (its condition failed)",
}


def result_text(result: str, exit_status: str | None, ran: bool = False) -> str:
    """A run's systemd Result in words for a person (`status`): `exit-code` and status 3 ->
    `failed (exit 3)`; anything that is not a systemd Result of a failure is returned as it is
    (success, running, missed...). `ran`: the status is the job's own (see classify)."""
    status = str(exit_status or "").strip()
    if result == "exit-code":
        if not ran and status.isdigit() and int(status) in _RUNNER_EXITS:
            return f"{_RUNNER_EXITS[int(status)]} (exit {status})"
        return f"failed (exit {status})" if status else "failed"
    if result not in _SYSTEMD_RESULTS:
        return result
    return _SYSTEMD_RESULTS[result].format(signal=f"signal {status}" if status else "a signal")


def said(row: dict) -> str | None:
    """`status`'s text for a refusal that noted its own fields (which upstream, the pause's
    note, the halt's reason); None when its row says nothing more, or the field is not there."""
    outcome = BY_NAME.get(str(row.get("result") or ""))
    if outcome is None or not outcome.said:
        return None
    first = outcome.said.split("{", 1)[1].split("}", 1)[0]
    if not row.get(first):
        return None
    return outcome.said.format(**{f: row.get(f) or "?" for f in outcome.fields})


def legend() -> tuple[tuple[str, str], ...]:
    """The page's legend: (state, words) in order, each naming the outcomes it shows."""
    return tuple((name, words.format(outcomes=", ".join(
        o.brief for o in OUTCOMES if o.page == name and not o.reported_as)))
        for name, _, words in PAGE_STATES)
