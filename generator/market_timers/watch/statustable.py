"""`market-timers status`'s table: the status document (status.py) for a person: the halts and
pauses in force first, one line per (session, job) in the day's order, then the incidents, the
sessions' early closes, the notes on `requires` and the outbox."""

from __future__ import annotations

from market_timers.config.dependencies import notes
from market_timers.contracts.outcomes import result_text, said
from market_timers.events.report import count_line, incident_line
from market_timers.watch.sessiondays import local_hm, local_last


def table(doc: dict) -> str:
    """The halts and pauses first (what will not run, and how to lift it), then one line per
    (session, job) in the day's order, exchange time beside UTC, then the notes."""
    cluster = doc.get("cluster")
    head = ("SESSION", "JOB", "EXCHANGE", "UTC", "TIMER", "RESULT", "EXIT", "DURATION",
            "ALERTS")
    if cluster:  # which node ran each job
        head = head[:6] + ("NODE",) + head[6:]
    rows = [_row(s, j, cluster) for s in doc["sessions"] for j in s["jobs"]]
    lines = [*controls(doc), *(f"warning: {w}" for w in doc.get("calendar_warnings") or [])]
    if cluster and cluster.get("ledger_error"):
        lines.append(f"warning: {cluster['ledger_error']} (showing node {cluster['node']}'s "
                     "local ledger only)")
    if not rows:
        return "\n".join([*lines, "no planned fire in this range (see `market-timers plan`)"])
    if lines:
        lines.append("")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in [head, *rows]]
    for s in doc["sessions"]:
        for line in [*map(incident_line, s.get("incidents", [])),
                     *map(count_line, s.get("counts", []))]:
            lines.append(f"{s['session']}  incident  {line}")
    notes_ = [f"note: {s.get('weekday', '')} {s['session']}: {m}" for s in doc["sessions"] for m in s.get("marks", [])]
    notes_ += [f"note: {n}" for n in notes(doc.get("requires") or {})]
    box = doc.get("outbox") or {}
    if box:
        notes_.append(f"outbox: {box.get('pending', 0)} alert(s) pending, "
                      f"{box.get('undeliverable', 0)} undeliverable (market-timers outbox list)")
    return "\n".join([*lines, *([""] if notes_ else []), *notes_])


def controls(doc: dict) -> list[str]:
    """The halts and pauses in force, one line each, with the command that lifts it."""
    lines = [f"halted: {h['what']}, by {h.get('by', '?')} on {h.get('host', '?')} since "
             f"{h.get('since', '?')}: {h.get('reason', '')} (to lift it: {h['resume']})"
             for h in doc.get("halts") or []]
    for p in doc.get("pauses") or []:
        until = f" until session {p['until']}" if p.get("until") else ""
        lines.append(f"paused: {p['scope']}{until}, by {p.get('by', '?')} since "
                     f"{p.get('since', '?')}: {p.get('note', '')} (to resume: {p['resume']})")
    return lines


def _row(session: dict, j: dict, cluster) -> tuple[str, ...]:
    duration = j["duration_sec"]
    result = result_text(j["result"], j["exit_status"], ran=j["attempts"] > 0) + (
        f" (attempt {j['attempts']})" if j["attempts"] > 1 else "")
    if (text := said(j)) is not None:  # which upstream, the pause's note, the halt's reason
        result = text
    elif j.get("stopped_by_halt"):  # killed by `market-timers halt`'s stop
        result = f"stopped by halt ({j['stopped_by_halt']})"
    if j.get("held"):  # still to come, and a halt or pause in force will refuse it
        result = f"{j['held']}: {result} ({j['held_by']})"
    if j["refused_starts"]:
        result += ", then refused: " + ", ".join(j["refused_starts"])
    local, utc = local_hm(j), j["fire_utc"][11:16] + "Z"
    if j.get("every_sec"):  # a periodic job: its window and period
        local = f"{local[:5]}-{local_last(j)}{local[5:]}"
        utc += f"-{(j.get('last_utc') or '')[11:16]}Z /{j['every_sec']}s"
    row = (f"{session.get('weekday', '')} {session['session']}".strip(), j["job"], local or "-", utc,
           j["timer"], result, str(j["exit_status"] or "-"),
           f"{duration:g}s" if isinstance(duration, int | float) else "-",
           ", ".join(f"{a['kind']} ({a['handling']})" for a in j["alerts"]) or "-")
    return row[:6] + (j.get("node") or "-",) + row[6:] if cluster else row
