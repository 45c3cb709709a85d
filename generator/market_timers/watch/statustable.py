"""`market-timers status`'s table: the status document (status.py) for a person, one line per
(session, job), then the incidents, the pauses and halts in force, the notes on `requires` and
the outbox."""

from __future__ import annotations

from market_timers.config.dependencies import notes
from market_timers.contracts.outcomes import result_text, said
from market_timers.events.report import count_line, incident_line


def table(doc: dict) -> str:
    cluster = doc.get("cluster")
    head = ("SESSION", "JOB", "FIRE (UTC)", "TIMER", "RESULT", "EXIT", "DURATION", "ALERTS")
    if cluster:  # which node ran each job
        head = head[:5] + ("NODE",) + head[5:]
    rows = []
    for s in doc["sessions"]:
        for j in s["jobs"]:
            duration = j["duration_sec"]
            result = result_text(j["result"], j["exit_status"], ran=j["attempts"] > 0) + (
                f" (attempt {j['attempts']})" if j["attempts"] > 1 else "")
            if (text := said(j)) is not None:  # which upstream, the pause's note, the halt's reason
                result = text
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
        lines.append("")
        lines += [f"note: {n}" for n in notes(doc["requires"])]
    box = doc.get("outbox") or {}
    if box:
        lines.append("")
        lines.append(f"outbox: {box.get('pending', 0)} alert(s) pending, "
                     f"{box.get('undeliverable', 0)} undeliverable (market-timers outbox list)")
    return "\n".join(lines)
