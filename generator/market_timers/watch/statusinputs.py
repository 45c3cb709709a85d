"""What the status document (status.py) reads besides the plan: the run records (any node's in
a cluster), a periodic job's slots, the pauses and halts in force, the session's incidents, the
alerts raised and the outbox. Each reader that is only a view gives an empty answer rather than
fail the whole document."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from market_timers.alerts.commands import outbox_summary
from market_timers.alerts.state import AlertState
from market_timers.controls.pause import current as paused_now
from market_timers.events.report import session_doc
from market_timers.ledger import DatabaseError, Key, runrecord
from market_timers.ledger.halts import cluster_records
from market_timers.ledger.halts import current as halts_now
from market_timers.runner.slotaccount import account
from market_timers.runner.slotclock import PeriodicSlots

# The alert layer's session events for an alert: spooled and sent at once ("alert"), kept for the
# digest, folded into an earlier one (dedup window), or recorded only (no [alerts] / kind off).
ALERT_EVENTS = ("alert", "digest", "deduplicated", "silent")


def pauses(config, book=None) -> list[dict]:
    """The pauses in force (`market-timers pause`, pause_on_failure); in a cluster, the cluster
    ledger's too (this node's alone when it cannot be reached: the ledger error says so)."""
    try:
        return paused_now(config, book)
    except DatabaseError:
        return paused_now(config)
    except OSError:
        return []


def halts(config, cluster=None) -> list[dict]:
    """The halts in force (`market-timers halt`): scope, name, what, by, since, host, reason,
    resume; `cluster`: the cluster ledger's too."""
    return halts_now(str(config.state_dir), cluster)


def cluster_halts(book):
    """The cluster ledger's halts, or None (no cluster, or it cannot be reached: the ledger
    error says so)."""
    try:
        return cluster_records(book) if book is not None else None
    except DatabaseError:
        return None


def ledger_only(config, shown: list[dict], first: str | None, last: str | None,
                records) -> list[dict]:
    """Plan-like entries for the runs this host's ledger holds of sessions from `first` to
    `last` (either None: open) that the plan does not: those before the install, or a job's
    sessions the plan has since forgotten. Their instant is the one the run was scheduled for.
    `records`: the ledger as status reads it (recordcache.Records)."""
    planned = {(e["job"], e["session"]) for e in shown}
    jobs = {j.name: j for j in getattr(config, "jobs", None) or []}
    out = []
    for name, job in jobs.items():
        for session in records.keys(name):
            if "+" in session or (name, session) in planned or not _dated(session) or (
                    first and session < first) or (last and session > last):
                continue
            try:
                Key(name, session)
            except ValueError:  # not a key the ledger would make
                continue
            record = records.read(name, session) or {}
            out.append({"job": name, "session": session, "unit": "",
                        "calendar": getattr(job, "calendar", None) or "",
                        "event": getattr(job, "event", None) or "",
                        "fire_utc": record.get("scheduled_utc") or record.get("started_utc")
                        or f"{session}T00:00:00Z"})
    return out


def _dated(session: str) -> bool:
    """A session's date (not a try's nor a daily job's label)."""
    return len(session) == 10 and session[4] == session[7] == "-"


def read_record(state_dir: Path, entry: dict, book):
    """The record (any node's, in cluster mode), None, or the DatabaseError that stopped it."""

    try:
        return runrecord.read(state_dir, entry["job"], entry["session"], book)
    except DatabaseError as e:
        return e


def periodic(state_dir: Path, entry: dict, now: datetime) -> dict:
    """`slots`: total, ran, skipped (by cause), ahead; `result` says it in a few words."""
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
    held = f", {s.held} held" if s.held else ""  # by a pause or halt: not run, not missed
    result = f"{state}: {s.ran} ran, {s.skipped} skipped{held} of {s.total}"
    if state == "done" and not s.ran and s.held < s.total:  # none ran: a miss, as the dead-man says
        result = f"missed: none of its {s.total} slots ran"
    return {"result": result, "every_sec": entry["every_sec"], "last_utc": entry.get("last_utc"),
            "duration_sec": s.longest_sec,
            "slots": {"total": s.total, "ran": s.ran, "skipped": s.skipped,
                      "skipped_overlap": s.overlap, "refused": s.refused,
                      "not_started": s.not_started, "held": s.held, "ahead": s.ahead,
                      "last_run": s.last_run_slot, "longest_sec": s.longest_sec}}


def incidents(config, session: str) -> dict:
    """The session's incidents and counted events (events of the trading system)."""
    return session_doc(config.state_dir, session)


def alert_events(config):
    """(session, job) -> the alerts raised for it, each session's events read once."""
    try:
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


def outbox(config) -> dict:
    try:
        return outbox_summary(config)
    except Exception:
        return {}
