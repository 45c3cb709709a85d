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
starts refused since (e.g. "already-ran"). In cluster mode the records are the cluster ledger's
(any node's run; each job gains `node`, the node that ran it, a NODE column in the table); when it cannot be
reached, status says so and shows this node's local ledger.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from market_timers.config.watch import watch_of
from market_timers.contracts import planfile
from market_timers.contracts.instants import iso, parse_iso
from market_timers.contracts.outcomes import result_text
from market_timers.host.systemctl import Systemctl
from market_timers.ledger import runrecord
from market_timers.watch.calendar_warnings import status_warnings
from market_timers.watch.fires import deadline, read_plan, timer_state

# The alert layer's session events for an alert: spooled and sent at once ("alert"), kept for the
# digest, folded into an earlier one (dedup window), or recorded only (no [alerts] / kind off).
ALERT_EVENTS = ("alert", "digest", "deduplicated", "silent")


def collect(config, session=None, now: datetime | None = None, *,
            systemctl: Systemctl | None = None, between=None,
            calendar_warnings: bool = True) -> dict | None:
    """The status document, or None when sync has never written a plan. `between`: (first,
    last) dates (either None: open) instead of the default sessions. `calendar_warnings`:
    False leaves them out (they build the exchange calendars: pandas, about a second, which the
    dead-man's page refresh every minute must not pay; the refresh warns of a data end)."""
    from market_timers.host.clock import utcnow

    now = now or utcnow()
    state_dir = Path(config.state_dir)
    plan = read_plan(state_dir)
    if plan is None:
        return None
    watch = watch_of(config)
    fires = plan.get("fires", [])
    if between is not None:
        first, last = (d.isoformat() if d else None for d in between)
        wanted = {e["session"] for e in fires if (first is None or e["session"] >= first)
                  and (last is None or e["session"] <= last)}
    else:
        wanted = _sessions(fires, session.isoformat() if session else None, now)
    fires = [e for e in fires if e["session"] in wanted]
    shown = (systemctl or Systemctl()).show(sorted({e["unit"] for e in fires}),
                                            ["LoadState", "ActiveState", "SubState"])
    sessions: dict[str, list[dict]] = {}
    events = _alert_events(config)
    requires = {j.name: list(j.requires) for j in getattr(config, "jobs", []) if j.requires}
    book, ledger_error = runrecord.cluster_book(config), None
    cluster = book is not None
    for e in sorted(fires, key=lambda e: (e["session"], e["fire_utc"], e["job"])):
        record = _read(state_dir, e, book) if ledger_error is None else None
        if isinstance(record, Exception):  # the cluster ledger: say so, show the local one
            ledger_error, book = f"the cluster run ledger cannot be reached: {record}", None
            record = None
        if record is None:
            record = runrecord.read(state_dir, e["job"], e["session"])
        record = record or {}
        sessions.setdefault(e["session"], []).append({
            "job": e["job"], "calendar": e.get("calendar", ""), "event": e.get("event", ""),
            "fire_utc": e["fire_utc"], "unit": e["unit"],
            "timer": timer_state(shown.get(e["unit"], {})),
            "result": _result(e, record, now, watch.slack_sec),
            "exit_status": record.get("exit_status"),
            "duration_sec": record.get("duration_sec"),
            "late_sec": record.get("late_sec"),
            "started_utc": record.get("started_utc"),
            "finished_utc": record.get("finished_utc"),
            "attempts": record.get("attempts", 1 if record else 0),
            "host": record.get("host"),
            "refused_starts": record.get("refused_starts", []),
            "alerts": events(e["session"], e["job"]),
            **({"node": record.get("node") or record.get("host")} if cluster else {}),
            **({"requires": requires[e["job"]]} if e["job"] in requires else {}),
            **({k: record[k] for k in ("upstream", "upstream_state") if record.get(k)}
               if record.get("refused") == "requires-unmet" else {}),
            **({k: record[k] for k in ("scope", "note") if record.get(k)}
               if record.get("refused") == "paused" else {}),
            **({k: record[k] for k in ("scope", "reason") if record.get(k)}
               if record.get("refused") == "halted" else {}),
            **({"stopped_by_halt": record["stopped_by_halt"]}
               if record.get("stopped_by_halt") else {}),
        })
        if e.get("every_sec"):  # a periodic job: one row per session, its slots counted
            sessions[e["session"]][-1].update(_periodic(state_dir, e, now))
    held = _pauses(config, book)
    cluster_halts = _cluster_halts(book)
    if book is not None:
        book.close()
    doc = {"now": iso(now), "plan_generated_utc": plan.get("generated_utc"),
           **({"requires": requires} if requires else {}),
           **({"pauses": held} if held else {}),
           **({"halts": halted} if (halted := _halts(config, cluster_halts)) else {}),
           "sessions": [{"session": s, "jobs": jobs, **_incidents(config, s)}
                        for s, jobs in sorted(sessions.items())],
           "outbox": _outbox(config),
           "calendar_warnings": status_warnings(config, now) if calendar_warnings else []}
    if getattr(config, "cluster", None) is not None:
        doc["cluster"] = {"node": config.cluster.node, "ledger_error": ledger_error}
    return doc


def _pauses(config, book=None) -> list[dict]:
    """The pauses in force (`market-timers pause`, pause_on_failure); in a cluster, the cluster
    ledger's too (this node's alone when it cannot be reached: the ledger error says so)."""
    from market_timers.controls.pause import current
    from market_timers.ledger import DatabaseError

    try:
        return current(config, book)
    except DatabaseError:
        return current(config)
    except OSError:
        return []


def _halts(config, cluster=None) -> list[dict]:
    """The halts in force (`market-timers halt`): scope, name, what, by, since, host, reason,
    resume; `cluster`: the cluster ledger's too."""
    from market_timers.ledger.halts import current

    return current(str(config.state_dir), cluster)


def _cluster_halts(book):
    """The cluster ledger's halts, or None (no cluster, or it cannot be reached: the ledger
    error says so)."""
    from market_timers.ledger import DatabaseError
    from market_timers.ledger.halts import cluster_records

    try:
        return cluster_records(book) if book is not None else None
    except DatabaseError:
        return None


def _read(state_dir: Path, entry: dict, book):
    """The record (any node's, in cluster mode), None, or the DatabaseError that stopped it."""
    from market_timers.ledger import DatabaseError

    try:
        return runrecord.read(state_dir, entry["job"], entry["session"], book)
    except DatabaseError as e:
        return e


def _periodic(state_dir: Path, entry: dict, now: datetime) -> dict:
    """`slots`: total, ran, skipped (by cause), ahead; `result` says it in a few words."""
    from market_timers.runner.slotaccount import account
    from market_timers.runner.slotclock import PeriodicSlots

    try:
        s = account(state_dir, entry["job"], entry["session"], PeriodicSlots.from_plan(entry),
                    int(entry.get("grace_sec", 0)), now, write=False)
    except (OSError, ValueError, KeyError):
        return {}
    if s.running:
        state = "running"
    elif s.ahead == s.total:
        state = "scheduled"
    else:
        state = "ahead" if s.ahead else "done"
    result = f"{state}: {s.ran} ran, {s.skipped} skipped of {s.total}"
    if state == "done" and not s.ran:  # no slot of the session ran: a miss, as the dead-man says
        result = f"missed: none of its {s.total} slots ran"
    return {"result": result, "every_sec": entry["every_sec"], "last_utc": entry.get("last_utc"),
            "duration_sec": s.longest_sec,
            "slots": {"total": s.total, "ran": s.ran, "skipped": s.skipped,
                      "skipped_overlap": s.overlap, "refused": s.refused,
                      "not_started": s.not_started, "ahead": s.ahead,
                      "last_run": s.last_run_slot, "longest_sec": s.longest_sec}}


def _incidents(config, session: str) -> dict:
    """The session's incidents and counted events (events of the trading system)."""
    from market_timers.events.report import session_doc

    return session_doc(config.state_dir, session)


def _sessions(fires: list[dict], session: str | None, now: datetime) -> set[str]:
    labels = sorted({e["session"] for e in fires})
    if session is not None:
        return {session}
    started = [e["session"] for e in fires if parse_iso(e["fire_utc"]) <= now]
    first = max(started) if started else (labels[0] if labels else "")
    return {s for s in labels if s >= first}


def _result(entry: dict, record: dict, now: datetime, slack: int) -> str:
    if record.get("refused"):  # no attempt: the start was refused (its result is the 17x exit)
        return record["refused"]
    if record.get("result"):
        return record["result"]
    if record.get("started_utc"):
        return "running"
    if parse_iso(entry["fire_utc"]) > now:
        return "scheduled"
    return "missed" if deadline(entry, slack) < now else "due"


def _alert_events(config):
    try:
        from market_timers.alerts.state import AlertState

        state = AlertState(Path(config.state_dir))
    except Exception:
        return lambda session, job: []

    cache: dict[str, list[dict]] = {}

    def events(session: str, job: str) -> list[dict]:
        if session not in cache:
            try:
                cache[session] = state.events(session)
            except Exception:
                cache[session] = []
        return [{"id": ev.get("id"), "kind": ev.get("kind"), "severity": ev.get("severity"),
                 "title": ev.get("title"), "handling": ev.get("event")}
                for ev in cache[session]
                if ev.get("event") in ALERT_EVENTS and ev.get("job") == job]

    return events


def _outbox(config) -> dict:
    try:
        from market_timers.alerts.commands import outbox_summary

        return outbox_summary(config)
    except Exception:
        return {}


def table(doc: dict) -> str:
    cluster = doc.get("cluster")
    head = ("SESSION", "JOB", "FIRE (UTC)", "TIMER", "RESULT", "EXIT", "DURATION", "ALERTS")
    if cluster:  # which node ran each job
        head = head[:5] + ("NODE",) + head[5:]
    rows = []
    for s in doc["sessions"]:
        for j in s["jobs"]:
            duration = j["duration_sec"]
            result = result_text(j["result"], j["exit_status"]) + (
                f" (attempt {j['attempts']})" if j["attempts"] > 1 else "")
            if j.get("upstream"):  # refused by `requires`: which upstream, in which state
                result = f"requires unmet: {j['upstream']} {j.get('upstream_state', '?')}"
            elif j["result"] == "paused" and j.get("note"):
                result = f"paused ({j['note']})"
            elif j["result"] == "halted" and j.get("reason"):
                result = f"halted ({j['reason']})"
            elif j.get("stopped_by_halt"):  # killed by `market-timers halt`'s stop
                result = f"stopped by halt ({j['stopped_by_halt']})"
            if j["refused_starts"]:
                result += ", then refused: " + ", ".join(j["refused_starts"])
            fire = j["fire_utc"].replace("T", " ")
            if j.get("every_sec"):  # a periodic job: its window and period
                fire += f"..{(j.get('last_utc') or '')[11:]} /{j['every_sec']}s"
            rows.append((s["session"], j["job"], fire, j["timer"],
                         result, str(j["exit_status"] or "-"),
                         f"{duration:g}s" if isinstance(duration, int | float) else "-",
                         ", ".join(f"{a['kind']} ({a['handling']})" for a in j["alerts"])
                         or "-"))
            if cluster:
                rows[-1] = rows[-1][:5] + (j.get("node") or "-",) + rows[-1][5:]
    warn = [f"warning: {w}" for w in doc.get("calendar_warnings") or []]
    if cluster and cluster.get("ledger_error"):
        warn.append(f"warning: {cluster['ledger_error']} (showing node {cluster['node']}'s "
                    "local ledger only)")
    if not rows:
        return "\n".join([*warn, "no planned fire in this range (see `market-timers plan`)"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [head, *rows]]
    from market_timers.events.report import count_line, incident_line

    for s in doc["sessions"]:
        for line in [*map(incident_line, s.get("incidents", [])),
                     *map(count_line, s.get("counts", []))]:
            lines.append(f"{s['session']}  incident  {line}")
    lines = [*warn, *([""] if warn else []), *lines]
    for p in doc.get("pauses") or []:
        lines.append("")
        until = f" until session {p['until']}" if p.get("until") else ""
        lines.append(f"paused: {p['scope']}{until}, by {p.get('by', '?')} since "
                     f"{p.get('since', '?')}: {p.get('note', '')} (to resume: {p['resume']})")
    for h in doc.get("halts") or []:
        lines.append("")
        lines.append(f"halted: {h['what']}, by {h.get('by', '?')} on {h.get('host', '?')} since "
                     f"{h.get('since', '?')}: {h.get('reason', '')} (to lift it: {h['resume']})")
    if doc.get("requires"):
        from market_timers.config.dependencies import notes

        lines.append("")
        lines += [f"note: {n}" for n in notes(doc["requires"])]
    box = doc.get("outbox") or {}
    if box:
        lines.append("")
        lines.append(f"outbox: {box.get('pending', 0)} alert(s) pending, "
                     f"{box.get('undeliverable', 0)} undeliverable (market-timers outbox list)")
    return "\n".join(lines)


def command(config, session=None, as_json: bool = False, now: datetime | None = None,
            html=None, since=None, until=None, *, systemctl: Systemctl | None = None) -> int:
    """`status`: the table, --json, or --html FILE (statuspage.py); --from/--to a date range
    (with --html and neither: a week back and every planned session)."""
    from market_timers.watch import statuspage

    between = (since, until) if since or until else None
    if html is not None and between is None and session is None:
        between = statuspage.window(now or _now())
    try:
        doc = collect(config, session, now, systemctl=systemctl, between=between)
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


def _now() -> datetime:
    from market_timers.host.clock import utcnow

    return utcnow()
