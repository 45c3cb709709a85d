"""`market-timers status --html FILE`, and `<page_dir>/status.html` after every dead-man pass: the
status document (status.py) as one self-contained HTML page for a desk screen. page_dir holds the
page only, so that a web server's user may read it and nothing of the state directory.

First a banner per halt and pause in force (who, when, why, the command that lifts it) and the
page's own health (the dead-man pass that wrote it, the last sync); then a card per session
(weekday, early close, today's marked), its jobs in the day's order. Each cell is one (job,
session): its state (the legend's words, `cell_state`; a run still to come that a halt or pause
covers is halted or paused), the instant in exchange time and UTC and, when it ran, the node, the
duration and the lateness, the alerts and how each was handled, and for a cell worth a look the
journal command to copy. The cards wrap: no sideways scroll, on a phone or beside a 24/7
calendar. No script, no external asset (the page is read from a file or a read-only web
server). Every cell carries `data-job`, `data-session` and `data-state`, so a test (or a scraper)
can read it back.

The page is built with jinja2 (autoescaped: job names, texts and alert titles are escaped);
its template is statuspagehtml.py's.
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta
from pathlib import Path

from market_timers.contracts.instants import iso
from market_timers.contracts.outcomes import BY_NAME, PAGE_STATES, legend
from market_timers.watch import pagekey
from market_timers.watch.sessiondays import local_hm, local_last

log = logging.getLogger("market_timers.watch")

PAGE_FILE = "status.html"  # under page_dir, rewritten by each dead-man pass
DAYS_BACK = 7  # the page's default window: a week of sessions back, and every planned one

STATES = legend()  # (state, the legend's words), in the legend's order: the outcome table's
VIEW_STATES = ("running", "scheduled", "due")  # a session with no outcome yet
LEGACY_REFUSED = "lock-busy"  # an older runner's overlap-skipped, still in old ledgers


def cell_state(row: dict) -> str:
    """One of STATES' names for a status row."""
    if row.get("held"):  # still to come, and a halt or pause in force will refuse it
        return row["held"]
    result = str(row.get("result") or "")
    head = result.split(":", 1)[0]
    if "slots" in row:  # a periodic job's session: "done: 370 ran, 6 skipped of 376"...
        slots = row["slots"]
        if head == "missed":
            return "missed"
        if head in ("running", "scheduled"):
            return head
        if head == "ahead" and not slots.get("ran"):
            return "due"
        if slots.get("skipped"):
            return "skipped"
        return "running" if head == "ahead" else "ok"
    if result == "success":
        return "ok"
    if result in VIEW_STATES:
        return result
    if result in BY_NAME and result != "ok":  # a refused start's kind, "missed"...
        return BY_NAME[result].page
    if result == LEGACY_REFUSED or result.startswith("refused"):
        return "refused"
    return "failed"


def window(now: datetime) -> tuple[date, date | None]:
    """The page's default window: DAYS_BACK days back, and every planned session ahead."""
    return (now - timedelta(days=DAYS_BACK)).date(), None


# How the alert layer handled an alert, in the words of the cell (statusinputs.ALERT_EVENTS).
HANDLED = {"alert": "sent", "digest": "kept for the digest",
           "deduplicated": "folded into an earlier alert", "silent": "recorded, not sent"}
# The cells worth a look in the journal: the command to copy is shown in them.
LOOK = ("failed", "missed", "refused", "skipped")


def _cell(session: str, row: dict) -> dict:
    state = cell_state(row)
    parts = [row.get("result") or state]
    if row.get("held"):
        parts = [f"{row['held']} ({row.get('held_by', '')}): not to run"]
    if state == "failed" and row.get("exit_status") not in (None, "", "0"):
        parts.append(f"status {row['exit_status']}")
    if row.get("node") or row.get("host"):
        parts.append(f"on {row.get('node') or row.get('host')}")
    if isinstance(row.get("duration_sec"), int | float):
        parts.append(f"{row['duration_sec']:.1f} s")
    if row.get("how"):  # its lateness is the operator's, not the timer's: not shown
        parts.append(f"started by {row['how']}" + (f" {row['by']}" if row.get("by") else ""))
    elif isinstance(row.get("late_sec"), int | float) and state not in ("scheduled", "due"):
        parts.append(f"late {max(0.0, row['late_sec']) * 1000:.0f} ms")
    alerts = [f"{a.get('title') or a.get('kind')} ({HANDLED.get(a.get('handling'), 'raised')})"
              for a in row.get("alerts", [])]
    local = local_hm(row)
    if row.get("every_sec"):
        local = f"{local[:5]}-{local_last(row)}{local[5:]}"
    journal = (f"journalctl MARKET_JOB={row['job']} MARKET_SESSION={session}"
               if state in LOOK else "")
    fire = row.get("fire_utc", "")
    when = local if local.endswith("UTC") else f"{local} · {fire[11:16]}Z".strip(" ·")
    text = ", ".join(str(p) for p in (parts[1:] if parts[0] in (state, "success") else parts))
    return {"state": state, "job": row["job"], "fire": fire, "when": when,
            "text": f" · {text}" if text else "", "alerts": alerts, "journal": journal}


def _banners(doc: dict) -> list[dict]:
    """A banner per halt and pause in force: who, when, why and the command that lifts it."""
    out = [{"kind": "halted", "what": h.get("what", ""), "by": h.get("by", "?"),
            "host": h.get("host", "?"), "since": h.get("since", "?"),
            "why": h.get("reason", ""), "lift": h.get("resume", "")}
           for h in doc.get("halts") or []]
    out += [{"kind": "paused", "what": p.get("scope", "") + (
                f" until session {p['until']}" if p.get("until") else ""),
             "by": p.get("by", "?"), "host": p.get("host", "?"), "since": p.get("since", "?"),
             "why": p.get("note", ""), "lift": p.get("resume", "")}
            for p in doc.get("pauses") or []]
    return out


def _cards(doc: dict) -> list[dict]:
    """A card per session, its cells in the day's order (status.collect's), today's marked."""
    now = str(doc.get("now", ""))[:10]
    today = min((s["session"] for s in doc["sessions"] if s["session"] >= now), default="")
    from market_timers.watch.statuspagehtml import rows

    return [{"session": s["session"], "weekday": s.get("weekday", ""),
             "today": s["session"] == today, "marks": s.get("marks", []),
             "rows": rows(s["session"], [_cell(s["session"], row) for row in s["jobs"]])}
            for s in doc["sessions"]]


def _waiting(outbox: dict, now: str) -> dict | None:
    """The oldest pending alert's age and instant (the page's health), or None."""
    from market_timers.contracts.instants import parse_iso

    since = outbox.get("oldest_pending_utc")
    if not since or not now:
        return None
    try:
        minutes = max(0, int((parse_iso(now) - parse_iso(since)).total_seconds() // 60))
    except ValueError:
        return None
    if minutes < 120:
        age = f"{minutes} min"
    elif minutes < 48 * 60:
        age = f"{minutes // 60} h {minutes % 60} min"
    else:
        age = f"{minutes // 1440} days"
    return {"age": age, "since": since}


def render(doc: dict, title: str = "market-timers", deadman_pass: str | None = None) -> str:
    """The page for a status document (status.collect); `deadman_pass`: the dead-man pass
    that wrote it (the page's own health)."""
    import jinja2

    from market_timers.watch.statuspagehtml import TEMPLATE

    incidents = [(s["session"], i) for s in doc["sessions"] for i in s.get("incidents", [])]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    return env.from_string(TEMPLATE).render(
        title=title, now=doc.get("now", ""), generated=doc.get("plan_generated_utc") or "never",
        deadman_pass=deadman_pass, banners=_banners(doc), cards=_cards(doc), states=STATES,
        incidents=incidents, colours=[(name, colour) for name, colour, _ in PAGE_STATES],
        outbox=doc.get("outbox") or {}, cluster=doc.get("cluster"),
        oldest=_waiting(doc.get("outbox") or {}, str(doc.get("now") or "")),
        warnings=doc.get("calendar_warnings") or [])


def write(path: Path, page: str, base: Path | None = None) -> None:
    """The page, replaced whole (0644: a web server's user reads it)."""
    from market_timers.files import atomicfile, safefs

    if base is not None:  # under page_dir: never through a planted symlink
        safefs.write_atomic(path, page, base=base, mode=0o644, sync=atomicfile.NONE)
    else:
        atomicfile.write(path, page, mode=0o644, sync=atomicfile.NONE)


def refresh(config, now: datetime) -> Path | None:
    """`<page_dir>/status.html` for the default window, after a dead-man pass. A failure is
    logged, never raised: the page is a view, the pass's findings are what matters."""
    page_dir = Path(config.page_dir)
    if not page_dir.is_dir():  # the package makes the default; a venv install has none
        if "page_dir" in (getattr(config, "raw", None) or {}):
            log.warning("deadman: page_dir %s is not a directory: no status page", page_dir)
        return None
    path = page_dir / PAGE_FILE
    try:
        start, end = window(now)
        key = pagekey.inputs(config, start.isoformat())
        if _restamped(config, path, key, now):
            return path
        from market_timers.watch import status  # a rebuild only: the idle pass restamps

        doc = status.collect(config, now=now, between=(start, end), calendar_warnings=False,
                             timers=False)
        if doc is None:
            return None
        write(path, render(doc, deadman_pass=doc["now"]), base=page_dir)
        if key is not None:
            pagekey.save(config.state_dir, {"inputs": key, "until": pagekey.until(doc, now),
                                            "now": doc["now"]})
        return path
    except Exception as e:  # noqa: BLE001 - a view must never fail the pass
        log.warning("deadman: cannot write %s: %s", path, e)
        return None


def _restamped(config, path: Path, key: str | None, now: datetime) -> bool:
    """True when the page shows what it would if rebuilt (pagekey.py): only its time stamps
    are moved to this pass, so that its health still names the last pass."""
    saved = pagekey.load(config.state_dir)
    stamp = iso(now)
    if key is None or saved.get("inputs") != key or not stamp < str(saved.get("until", "")):
        return False
    from market_timers.files import safefs

    try:  # under page_dir: never through a planted symlink
        page = safefs.read_bytes(path, base=path.parent).decode()
    except (OSError, UnicodeDecodeError):
        return False
    write(path, pagekey.restamp(page, str(saved["now"]), stamp), base=path.parent)
    pagekey.save(config.state_dir, {**saved, "now": stamp})
    return True
