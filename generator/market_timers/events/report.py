"""Incidents and counts of a session as text lines (digest, status) and as JSON (status --json)."""

from __future__ import annotations

from market_timers.events.store import read_session


def _hms(stamp: str | None) -> str:
    return f"{stamp[11:19]}Z" if stamp else "-"


def incident_line(i: dict) -> str:
    kinds = ", ".join(dict.fromkeys(e["kind"] for e in i.get("events", [])))
    if i.get("state") == "resolved":
        end = f"resolved {_hms(i.get('resolved'))} after {i.get('duration_sec', 0):g} s"
    else:
        end = "still open"
    how = {"alerted": f"alerted {i.get('alert_id')} at {_hms(i.get('alerted_at'))}"
                      + (", recovery sent" if i.get("recovery_id") else ""),
           "digest": "not interrupting (digest only)",
           "deduplicated": "folded into an earlier alert (dedup window)"}.get(
        i.get("handling") or "", "not alerted yet")
    return (f"{i['rule']} {i['key']}: opened {_hms(i.get('opened'))}, {end}, {how} "
            f"({i.get('count', 0)} events: {kinds})")


def count_line(c: dict) -> str:
    worst = f", worst {c['worst']:g} at {_hms(c.get('worst_at'))}" if c.get("worst") is not None \
        else ""
    how = f"alerted {c['alert_id']}" if c.get("alert_id") else \
        "under the threshold: digest only" if c["count"] < c.get("threshold", 0) else "not sent"
    return (f"{c['kind']}: {c['count']} events (threshold {c.get('threshold')}){worst}, first "
            f"{_hms(c.get('first'))}, last {_hms(c.get('last'))}; {how}")


def digest_lines(state_dir, session: str) -> list[str]:
    """The digest's section; [] when the session had no incident and no counted event."""
    try:
        doc = read_session(state_dir, session)
    except Exception:  # the digest goes out whatever happens to this section
        return []
    if not doc["incidents"] and not doc["counts"]:
        return []
    return ["", "Incidents (events of the trading system):",
            *[f"  {incident_line(i)}" for i in doc["incidents"]],
            *[f"  {count_line(c)}" for c in doc["counts"]]]


def session_doc(state_dir, session: str) -> dict:
    try:
        return read_session(state_dir, session)
    except Exception:
        return {"incidents": [], "counts": []}
