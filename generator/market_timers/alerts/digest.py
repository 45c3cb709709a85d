"""The per-session email digest: every job's result, its duration against its recent median,
skips, stale starts, misses, the alerts raised (sent, folded, still pending) and the info-level
notices that were routed here instead of interrupting anyone.

Durations come from the handlers' own session events and, when present, from the run records
(runrecord.all_records: the ledger's latest attempt, else a legacy
`<state_dir>/runs/<job>/<session>.json`; `duration_sec`, or `started_utc` + `finished_utc`, and
`result`); a missing or unreadable record is skipped.
"""

from __future__ import annotations

import statistics
from datetime import datetime
from pathlib import Path

from market_timers.alerts.model import Alert, make_id
from market_timers.contracts.instants import iso
from market_timers.contracts.outcomes import OUTCOMES
from market_timers.ledger import runrecord

RECENT = 10


def _record_duration(rec: dict) -> float | None:
    if isinstance(d := rec.get("duration_sec"), int | float) and not isinstance(d, bool):
        return float(d)
    try:
        start = datetime.fromisoformat(str(rec["started_utc"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(rec["finished_utc"]).replace("Z", "+00:00"))
        return (end - start).total_seconds()
    except (KeyError, ValueError, TypeError):
        return None


def run_durations(state, state_dir: Path) -> dict[str, dict[str, float]]:
    """job -> session -> duration (s), from run records and session events."""
    out: dict[str, dict[str, float]] = {}
    for rec in runrecord.all_records(state_dir):
        if (d := _record_duration(rec)) is not None:
            out.setdefault(rec["job"], {})[str(rec["session"])] = d
    for session in state.sessions():
        for ev in state.events(session):
            if ev.get("event") == "run" and isinstance(ev.get("duration"), int | float):
                out.setdefault(ev["job"], {}).setdefault(session, float(ev["duration"]))
    return out


def _counted(kinds: list[str]) -> str:
    """`ok, failed` - or, for a periodic job's many runs, `ok x376, overlap-skipped x1`."""
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items())


def _job_lines(results: dict[str, list[str]], durations: dict[str, dict[str, float]],
               session: str) -> list[str]:
    """Each job's results in the session and its duration against its recent median."""
    if not results:
        return ["  (no run recorded for this session)"]
    lines = []
    for job in sorted(results):
        mine = durations.get(job, {})
        now_d = mine.get(session)
        history = [d for s, d in sorted(mine.items()) if s < session][-RECENT:]
        shown = f"{now_d:.1f} s" if now_d is not None else "-"
        if now_d is not None and history:
            shown += f" (median of last {len(history)}: {statistics.median(history):.1f} s)"
        lines.append(f"  {job}: {_counted(results[job])}; duration {shown}")
    return lines


def _tally_line(results: dict[str, list[str]]) -> str:
    """`Skips: 1, stale starts: 0, misses: 0`: the outcomes the digest counts, over all jobs."""
    counts = [f"{o.tally}: {sum(r.count(o.name) for r in results.values())}"
              for o in OUTCOMES if o.tally]
    line = ", ".join(counts)
    return line[:1].upper() + line[1:]


def build(ctx, session: str, incidents=None, halts=None) -> str:
    """The digest's text; incidents(state_dir, session): the trading system's incidents as lines
    (events/report.py, handed in by the command layer: events sit above alerts); `halts`: the
    halts in force (ledger.halts.in_force: with [cluster], the cluster ledger's), else this
    host's own records."""
    events = ctx.state.events(session)
    durations = run_durations(ctx.state, ctx.state_dir)
    results: dict[str, list[str]] = {}
    alerts, notices = [], []
    delivered = {e["id"]: e["channel"] for e in events if e.get("event") == "delivered"}
    for ev in events:
        job = ev.get("job") or "-"
        if ev.get("event") == "run":
            results.setdefault(job, []).append("ok")
        elif ev.get("event") in ("alert", "deduplicated", "digest", "silent"):
            if ev.get("kind") != "recovery" and ev.get("job"):
                results.setdefault(job, []).append(ev.get("kind", "?"))
            if ev["event"] == "digest":
                notices.append(f"  {ev.get('at', '')[11:16]}Z {ev.get('title', ev.get('kind'))}")
            elif ev["event"] == "alert":
                alerts.append(ev)
    for rec in runrecord.all_records(ctx.state_dir):  # runs no handler reported (e.g. no alerts config)
        if rec["session"] == session and rec["job"] not in results:
            results[rec["job"]] = [str(rec.get("refused") or rec.get("result")
                                       or "started, no result")]
    lines = [f"market-timers digest for session {session}", "", "Jobs:",
             *_job_lines(results, durations, session), "", _tally_line(results)]
    for outcome in (o for o in OUTCOMES if o.held):  # deliberate (a pause, a halt...), not missed
        if held := sorted(j for j, r in results.items() if outcome.name in r):
            lines.append(f"{outcome.held}: {', '.join(held)}")
    from market_timers.ledger.halts import current as halts_in_force

    for h in halts if halts is not None else halts_in_force(str(ctx.state_dir)):
        lines.append(f"Halt in force: {h['what']} by {h.get('by', '?')} on {h.get('host', '?')} "
                     f"since {h.get('since', '?')}: {h.get('reason', '')} (to lift it: "
                     f"{h['resume']})")
    from market_timers.runner.slotaccount import periodic_digest_lines

    lines += periodic_digest_lines(ctx.state_dir, session, ctx.now())  # periodic jobs' slots
    lines += ["", "Alerts:"]
    pending = {a.id: a for a in ctx.outbox.load_all()}
    for ev in alerts:
        status = (f"delivered via {delivered[ev['id']]}" if ev["id"] in delivered
                  else f"{pending[ev['id']].state} ({pending[ev['id']].last_error or 'not tried'})"
                  if ev["id"] in pending else "sent earlier or dropped")
        lines.append(f"  {ev['id']} {ev.get('severity')} {ev.get('title')}: {status}")
    if not alerts:
        lines.append("  (none)")
    folded = sum(1 for e in events if e.get("event") == "deduplicated")
    if folded:
        lines.append(f"  + {folded} repeat(s) folded into the alerts above (dedup window)")
    lines += incidents(ctx.state_dir, session) if incidents else []
    lines += ["", "Routed to this digest (info, or no channel configured):", *(notices or ["  (none)"])]
    waiting = [a for a in pending.values() if a.kind != "digest"]
    lines += ["", f"Outbox: {len(waiting)} alert(s) not delivered yet"
              + (f": {', '.join(sorted({a.id for a in waiting}))}" if waiting else "")]
    return "\n".join(lines)


def digest_alert(ctx, session: str, incidents=None, halts=None) -> Alert:
    now = ctx.now()
    return Alert(id=make_id("digest", session, now), kind="digest", severity="info",
                 key=f"digest:{session}", title=f"market-timers digest for session {session}",
                 text=build(ctx, session, incidents, halts), session=session, created=iso(now),
                 chain=["email"], channel_since=iso(now))
