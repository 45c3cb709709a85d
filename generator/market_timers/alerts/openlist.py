"""The open incidents, for `market-timers alerts`: the criticals still repeating
(`alerts/active/`) and every job's unresolved failures and misses (`alerts/jobs/`), one row per
alert id, oldest first, each with the exact command that acknowledges it."""

from __future__ import annotations

from market_timers.alerts.model import parse_iso


def age_text(seconds: float) -> str:
    """"<1 min", "12 min", "3 h 05 min", "2 d 4 h"."""
    minutes = int(max(seconds, 0) // 60)
    if minutes < 1:
        return "<1 min"
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes // (24 * 60)} d {minutes % (24 * 60) // 60} h"


def _row(ctx, alert_id: str, severity, job, session, title, opened, acked: bool) -> dict:
    since = _instant(opened)
    age = (ctx.now() - since).total_seconds() if since else None
    return {"id": alert_id, "severity": severity or "?", "job": job or "",
            "session": session or "", "what": f"{job} {session}".strip() if job else title,
            "opened": opened or "", "age_sec": age,
            "age": age_text(age) if age is not None else "?", "acknowledged": acked,
            "ack": None if acked else f"market-timers ack {alert_id}"}


def _instant(text):
    try:
        return parse_iso(text) if isinstance(text, str) else None
    except ValueError:
        return None


def open_rows(ctx) -> list[dict]:
    """Every open incident (see the module's doc), oldest first."""
    rows: dict[str, dict] = {}
    acked = {}
    for job in ctx.state.jobs():
        for occurrence, incident in ctx.state.open_incidents(job).items():
            alert_id = incident.get("alert_id")
            if isinstance(alert_id, str) and alert_id:
                acked[alert_id] = bool(incident.get("acked"))
                rows[alert_id] = _row(ctx, alert_id, incident.get("severity"), job,
                                      occurrence, "", incident.get("at"), acked[alert_id])
    for record in ctx.escalations.active():  # a repeating critical: its alert says the most
        a = record["alert"]
        slot = (a.get("details") or {}).get("slot")
        session = f"{a.get('session')} slot {slot}" if slot else a.get("session")
        rows[a["id"]] = _row(ctx, a["id"], a.get("severity"), a.get("job"), session,
                             a.get("title"), a.get("created"), acked.get(a["id"], False))
    return sorted(rows.values(), key=lambda r: (r["opened"], r["id"]))


def lines(rows: list[dict]) -> list[str]:
    """The table for a person."""
    if not rows:
        return ["no open incident (no unresolved failure or miss, no repeating critical)"]
    width = max(len(r["what"]) for r in rows)
    out = [f"{'ID':<13}  {'SEVERITY':<8}  {'JOB SESSION / WHAT':<{width}}  {'AGE':<10}  "
           "TO ACKNOWLEDGE"]
    for r in rows:
        out.append(f"{r['id']:<13}  {r['severity']:<8}  {r['what']:<{width}}  {r['age']:<10}  "
                   + (r["ack"] or "acknowledged"))
    return out
