"""`market-timers status [--session DATE] [--json]`: what was planned, what systemd holds, what ran.

For each session (by default the latest one that has started and every one planned after it), each
job's planned UTC instant, its timer's state (waiting / elapsed / missing / inactive, from
`systemctl show`), the run's result and duration (the run ledger, through runrecord.py), and the
alerts raised for it (the alert layer's session events) with the outbox's pending count. `--json`
prints one object:

    {"now": "...Z", "plan_generated_utc": "...Z",
     "sessions": [{"session": "2025-11-28",
                   "jobs": [{"job", "calendar", "event", "fire_utc", "unit", "timer", "result",
                             "exit_status", "duration_sec", "late_sec", "started_utc",
                             "finished_utc",
                             "attempts", "host", "refused_starts",
                             "alerts": [{"id", "kind", "severity", "title", "handling"}]}],
                   "incidents": [{"id", "rule", "key", "opened", "resolved", "duration_sec",
                                  "state", "handling", "alert_id", "events"...}],
                   "counts": [{"kind", "count", "threshold", "worst", "first", "last"...}]}],
     "outbox": {"pending": 0, "undeliverable": 0, ...},
     "calendar_warnings": ["calendar XSHG: ... sessions up to 2026-12-31 only; ..."],
     "cluster": {"node": "ny4-a", "ledger_error": null}}   (in cluster mode only)

A periodic job has one row per session: `result` reads `running: 120 ran, 3 skipped of 376`
(state: scheduled, running, ahead, done), or `missed: none of its 376 slots ran` once the session's
window has passed with no slot run; `duration_sec` is its longest run, and `slots` holds the
counts (total, ran, skipped, skipped_overlap, refused, not_started, ahead, last_run, longest_sec).

`result` is the latest attempt's systemd Result (success, exit-code, signal, watchdog, timeout...;
the table says it in words: `failed (exit 3)`, `killed (signal KILL)`), a refused
start's kind when the session never started (stale-start, overlap-skipped), "running" (started, not
finished), or with nothing in the ledger: "scheduled" (instant ahead), "due" (past the instant,
inside grace + timeout + slack) or "missed". `attempts` counts the session's runs (more than one
only with `market-timers run --force`), `host` is where the latest ran, `refused_starts` lists the
starts refused since (e.g. "already-ran"); `how` and `by` say who started a run that its timer
did not (operator, forced, retry). `fire_local` and `timezone` are the instant in exchange time;
`held` ("halted", "paused") and `held_by` mark a run still to come that a control will refuse. In cluster mode the records are the cluster ledger's
(any node's run; each job gains `node`, the node that ran it, a NODE column in the table); when it cannot be
reached, status says so and shows this node's local ledger.
"""

from __future__ import annotations

import json
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

from market_timers.config.dependencies import chain_depths
from market_timers.config.watch import watch_of
from market_timers.contracts import planfile
from market_timers.contracts.instants import iso
from market_timers.contracts.outcomes import BY_NAME
from market_timers.host.clock import utcnow
from market_timers.host.systemctl import Systemctl
from market_timers.ledger import runrecord
from market_timers.watch import recordcache, statusinputs, statuspage
from market_timers.watch.calendar_warnings import status_warnings
from market_timers.watch.fires import deadline, read_plan, timer_state
from market_timers.watch.sessiondays import session_days, weekday
from market_timers.watch.statusholds import mark_held
from market_timers.watch.statustable import table


def collect(config, session=None, now: datetime | None = None, *,
            systemctl: Systemctl | None = None, between=None,
            calendar_warnings: bool = True, timers: bool = True) -> dict | None:
    """The status document, or None when sync has never written a plan. `between`: (first,
    last) dates (either None: open) instead of the default sessions. `calendar_warnings`:
    False leaves them out (they build the exchange calendars: pandas, about a second, which the
    dead-man's page refresh every minute must not pay; the refresh warns of a data end).
    `timers`: False asks systemd nothing, each `timer` reads "-" (the page shows none)."""
    now = now or utcnow()
    state_dir = Path(config.state_dir)
    plan = read_plan(state_dir)
    if plan is None:
        return None
    watch = watch_of(config)
    local = recordcache.Records(state_dir, now)  # each record read again only when it changed
    fires = _shown_fires(config, plan.get("fires", []), session, between, now, local)
    shown = (systemctl or Systemctl()).show(sorted({e["unit"] for e in fires}),
                                            ["LoadState", "ActiveState", "SubState"]) \
        if timers else {}
    sessions: dict[str, list[dict]] = {}
    events = statusinputs.alert_events(config)
    requires = {j.name: list(j.requires) for j in getattr(config, "jobs", []) if j.requires}
    book, ledger_error = runrecord.cluster_book(config), None
    cluster = book is not None
    depth = chain_depths(requires)
    for e in sorted(fires, key=lambda e: (e["session"], e["fire_utc"], depth.get(e["job"], 0),
                                          e["job"])):
        record = statusinputs.read_record(state_dir, e, book) if book is not None else None
        if isinstance(record, Exception):  # the cluster ledger: say so, show the local one
            ledger_error, book = f"the cluster run ledger cannot be reached: {record}", None
            record = None
        if book is None:  # no cluster, or it cannot be reached (else read_record read both)
            record = local.read(e["job"], e["session"])
        record = record or {}
        sessions.setdefault(e["session"], []).append(_job_row(
            e, record, timer=timer_state(shown.get(e["unit"], {})) if e["unit"] and timers else "-",
            result=_result(e, record, now, watch.slack_sec), alerts=events(e["session"], e["job"]),
            node=cluster, requires=requires.get(e["job"])))
        if e.get("every_sec"):  # a periodic job: one row per session, its slots counted
            sessions[e["session"]][-1].update(statusinputs.periodic(state_dir, e, now))
    local.save()
    held = statusinputs.pauses(config, book)
    cluster_halts = statusinputs.cluster_halts(book)
    if book is not None:
        book.close()
    halted = statusinputs.halts(config, cluster_halts)
    mark_held(sessions, config, halted, held)
    doc = {"now": iso(now), "plan_generated_utc": plan.get("generated_utc"),
           **({"requires": requires} if requires else {}),
           **({"pauses": held} if held else {}),
           **({"halts": halted} if halted else {}),
           "sessions": _session_docs(config, sessions, plan.get("fires", [])),
           "outbox": statusinputs.outbox(config),
           "calendar_warnings": status_warnings(config, now) if calendar_warnings else []}
    if getattr(config, "cluster", None) is not None:
        doc["cluster"] = {"node": config.cluster.node, "ledger_error": ledger_error}
    return doc


def _job_row(entry: dict, record: dict, *, timer: str, result: str, alerts: list[dict],
             node: bool, requires: list[str] | None) -> dict:
    """One job's row of a session: the plan's entry, what the ledger holds, its alerts."""
    return {
        "job": entry["job"], "calendar": entry.get("calendar", ""), "event": entry.get("event", ""),
        "fire_utc": entry["fire_utc"], "fire_local": entry.get("fire_local"),
        "timezone": entry.get("timezone"), "unit": entry["unit"],
        "timer": timer,
        "result": result,
        "exit_status": record.get("exit_status"),
        "duration_sec": record.get("duration_sec"),
        "late_sec": record.get("late_sec"),
        "started_utc": record.get("started_utc"),
        "finished_utc": record.get("finished_utc"),
        "attempts": record.get("attempts", 1 if record else 0),
        "host": record.get("host"),
        "refused_starts": record.get("refused_starts", []),
        "alerts": alerts,
        **({"node": record.get("node") or record.get("host")} if node else {}),
        **({"requires": requires} if requires else {}),
        **_refusal_fields(record),
        **({"stopped_by_halt": record["stopped_by_halt"]}
           if record.get("stopped_by_halt") else {}),
        # started otherwise than by its timer: operator, forced, retry (the ledger's `how`)
        **({"how": record["how"], "by": record.get("by")}
           if record.get("how") not in (None, "timer") else {}),
    }


def _shown_fires(config, plan_fires: list[dict], session, between, now: datetime,
                 records: recordcache.Records) -> list[dict]:
    """The plan's entries of the sessions shown and, for a window with a bound, the runs the
    ledger holds in it that the plan does not (sessions before the install)."""
    if callable(between):  # a window that depends on the plan's sessions (desk_window)
        between = between(plan_fires)
    wanted = _wanted(plan_fires, session, between, now)
    fires = [e for e in plan_fires if e["session"] in wanted]
    first, last = (session.isoformat(),) * 2 if session else (
        (d.isoformat() if d else None for d in between) if between else (None, None))
    if first or last:
        fires += statusinputs.ledger_only(config, fires, first, last, records)
    return fires


def _session_docs(config, sessions: dict[str, list[dict]], plan_fires: list[dict]) -> list:
    """Each session's part of the document: its weekday, its marks, its jobs, its incidents."""
    days = session_days(plan_fires)
    return [{"session": s, "weekday": weekday(s), **_marks(days, s), "jobs": jobs,
             **statusinputs.incidents(config, s)} for s, jobs in sorted(sessions.items())]


def _marks(days: dict, session: str) -> dict:
    """The session's early close and late open, each naming its calendar."""
    marks = [f"{d.calendar} {m}" for (_, s), d in sorted(days.items()) if s == session
             for m in d.marks()]
    return {"marks": marks} if marks else {}


def desk_window(plan_fires: list[dict], now: datetime, week: bool) -> tuple:
    """The table's default sessions: today's (the first on or after today, UTC) and the next
    one; `week`: every session of the seven days from today's."""
    labels = sorted({e["session"] for e in plan_fires if e["session"] >= f"{now:%Y-%m-%d}"})
    if not labels:
        return (None, None)
    first = date.fromisoformat(labels[0])
    if week:
        return (first, first + timedelta(days=6))
    return (first, date.fromisoformat(labels[1] if len(labels) > 1 else labels[0]))


def _wanted(fires: list[dict], session, between, now: datetime) -> set[str]:
    """The sessions shown: `between` (first, last: either None is open), else `session`, else
    the latest that has started and every one after it."""
    if between is None:
        return _sessions(fires, session.isoformat() if session else None, now)
    first, last = (d.isoformat() if d else None for d in between)
    return {e["session"] for e in fires if (first is None or e["session"] >= first)
            and (last is None or e["session"] <= last)}


def _sessions(fires: list[dict], session: str | None, now: datetime) -> set[str]:
    labels = sorted({e["session"] for e in fires})
    if session is not None:
        return {session}
    stamp = iso(now)
    started = [e["session"] for e in fires if e["fire_utc"] <= stamp]
    first = max(started) if started else (labels[0] if labels else "")
    return {s for s in labels if s >= first}


def _refusal_fields(record: dict) -> dict:
    """A refused start's own fields that its outcome row names (upstream, the pause's note...)."""
    if not record.get("refused"):
        return {}
    outcome = BY_NAME.get(str(record["refused"]))
    return {k: record[k] for k in outcome.fields if record.get(k)} if outcome else {}


def _result(entry: dict, record: dict, now: datetime, slack: int) -> str:
    if record.get("refused"):  # no attempt: the start was refused (its result is the 17x exit)
        return record["refused"]
    if record.get("result"):
        return record["result"]
    if record.get("started_utc"):
        return "running"
    if entry["fire_utc"] > iso(now):  # ISO UTC to the second: text order is instant order
        return "scheduled"
    return "missed" if deadline(entry, slack) < now else "due"


def command(config, session=None, as_json: bool = False, now: datetime | None = None,
            html=None, since=None, until=None, week: bool = False, *,
            systemctl: Systemctl | None = None) -> int:
    """`status`: the table, --json, or --html FILE (statuspage.py); --from/--to a date range
    (with --html and neither: a week back and every planned session; the table: today's
    session and the next, `week` the seven days from today's; --json: from the latest started
    session on, unless `week`)."""
    now = now or utcnow()
    between = (since, until) if since or until else None
    if html is not None and between is None and session is None:
        between = statuspage.window(now)
    elif between is None and session is None and (week or not as_json):
        def between(fires):
            return desk_window(fires, now, week)
    try:
        doc = collect(config, session, now, systemctl=systemctl, between=between,
                      timers=html is None)
    except planfile.PlanFileError as e:  # it names the file and what is wrong with it
        print(f"market-timers status: {e}", file=sys.stderr)
        return 1
    if doc is None:
        print(f"market-timers status: no {planfile.path(config.state_dir)}: sync has not "
              "run yet (`market-timers sync`)")
        return 1
    if html is not None:
        try:
            statuspage.write(Path(html), statuspage.render(doc))
        except OSError as e:
            print(f"market-timers status: cannot write {html}: {e.strerror or e}",
                  file=sys.stderr)
            return 1
        print(f"wrote {html}: {len(doc['sessions'])} session(s)")
        return 0
    print(json.dumps(doc, indent=1) if as_json else table(doc))
    return 0

