"""`market-timers status --html FILE`, and `<state_dir>/status.html` after every dead-man pass: the
status document (status.py) as one self-contained HTML page, sessions x jobs like a grid view.

Each cell is one (job, session): its state (the legend's words, `cell_state`), the planned instant
and, when it ran, the node, the duration and the lateness; incidents and counted events of the
trading system follow per session. No script, no external asset (the page is read from a file or
a read-only web server, also on a phone: the grid scrolls sideways). Every cell carries
`data-job`, `data-session` and `data-state`, so a test (or a scraper) can read it back.

The page is built with jinja2 (autoescaped: job names, texts and alert titles are escaped).
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta
from pathlib import Path

from market_timers.contracts.outcomes import BY_NAME, PAGE_STATES, legend

log = logging.getLogger("market_timers.watch")

PAGE_FILE = "status.html"  # under the state directory, rewritten by each dead-man pass
DAYS_BACK = 7  # the page's default window: a week of sessions back, and every planned one

STATES = legend()  # (state, the legend's words), in the legend's order: the outcome table's
VIEW_STATES = ("running", "scheduled", "due")  # a session with no outcome yet
LEGACY_REFUSED = "lock-busy"  # an older runner's overlap-skipped, still in old ledgers


def cell_state(row: dict) -> str:
    """One of STATES' names for a status row."""
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


def _cell(row: dict) -> dict:
    state = cell_state(row)
    parts = [row.get("result") or state]
    if state == "failed" and row.get("exit_status") not in (None, "", "0"):
        parts.append(f"status {row['exit_status']}")
    if row.get("node") or row.get("host"):
        parts.append(f"on {row.get('node') or row.get('host')}")
    if isinstance(row.get("duration_sec"), int | float):
        parts.append(f"{row['duration_sec']:.1f} s")
    if isinstance(row.get("late_sec"), int | float) and state not in ("scheduled", "due"):
        parts.append(f"late {max(0.0, row['late_sec']) * 1000:.0f} ms")
    alerts = [a.get("title") or a.get("kind") for a in row.get("alerts", [])]
    return {"state": state, "job": row["job"], "fire": row.get("fire_utc", ""),
            "text": ", ".join(str(p) for p in parts), "alerts": alerts}


def render(doc: dict, title: str = "market-timers") -> str:
    """The page for a status document (status.collect)."""
    import jinja2

    sessions = [s["session"] for s in doc["sessions"]]
    jobs: list[str] = []
    grid: dict[tuple[str, str], dict] = {}
    for s in doc["sessions"]:
        for row in s["jobs"]:
            if row["job"] not in jobs:
                jobs.append(row["job"])
            grid[(row["job"], s["session"])] = _cell(row)
    incidents = [(s["session"], i) for s in doc["sessions"] for i in s.get("incidents", [])]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    return env.from_string(_TEMPLATE).render(
        title=title, now=doc.get("now", ""), generated=doc.get("plan_generated_utc") or "never",
        sessions=sessions, jobs=sorted(jobs), grid=grid, states=STATES, incidents=incidents,
        colours=[(name, colour) for name, colour, _ in PAGE_STATES],
        outbox=doc.get("outbox") or {}, cluster=doc.get("cluster"),
        warnings=doc.get("calendar_warnings") or [])


def write(path: Path, page: str, base: Path | None = None) -> None:
    """The page, replaced whole (0644: a web server's user reads it)."""
    from market_timers.files import atomicfile, safefs

    if base is not None:  # under the state directory: never through a planted symlink
        safefs.write_atomic(path, page, base=base, mode=0o644, sync=atomicfile.NONE)
    else:
        atomicfile.write(path, page, mode=0o644, sync=atomicfile.NONE)


def refresh(config, now: datetime) -> Path | None:
    """`<state_dir>/status.html` for the default window, after a dead-man pass. A failure is
    logged, never raised: the page is a view, the pass's findings are what matters."""
    from market_timers.watch import status

    state_dir = Path(config.state_dir)
    try:
        start, end = window(now)
        doc = status.collect(config, now=now, between=(start, end), calendar_warnings=False)
        if doc is None:
            return None
        path = state_dir / PAGE_FILE
        write(path, render(doc), base=state_dir)
        return path
    except Exception as e:  # noqa: BLE001 - a view must never fail the pass
        log.warning("deadman: cannot write %s: %s", state_dir / PAGE_FILE, e)
        return None


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}: sessions and jobs</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
p.meta { color: #555; margin: 0 0 1em; }
.grid { overflow-x: auto; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 4px 6px; text-align: left; vertical-align: top; }
thead th { white-space: nowrap; }
th.job { position: sticky; left: 0; background: #f6f6f6; white-space: nowrap; }
td.cell { min-width: 7em; font-size: 12px; }
td.cell .state { font-weight: 600; display: block; }
{% for name, colour in colours %}.{{ name }} { background: {{ colour }}; }
{% endfor %}.none { background: #fff; }
ul.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4em 1em; }
ul.legend li span { display: inline-block; width: 1em; height: 1em; border: 1px solid #999;
  vertical-align: middle; margin-right: .3em; }
.warn { color: #8a4b00; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="meta">As of {{ now }}; plan written {{ generated }}{% if cluster %}; node {{ cluster.node }}{% if cluster.ledger_error %} <span class="warn">({{ cluster.ledger_error }})</span>{% endif %}{% endif %}.
Outbox: {{ outbox.get("pending", 0) }} pending, {{ outbox.get("undeliverable", 0) }} undeliverable.</p>
{% for w in warnings %}<p class="warn">{{ w }}</p>{% endfor %}
<div class="grid">
<table id="grid">
<thead><tr><th class="job">job</th>{% for s in sessions %}<th scope="col">{{ s }}</th>{% endfor %}</tr></thead>
<tbody>
{% for job in jobs %}
<tr><th class="job" scope="row">{{ job }}</th>
{% for s in sessions %}
{% set c = grid.get((job, s)) %}
{% if c %}
<td class="cell {{ c.state }}" data-job="{{ job }}" data-session="{{ s }}" data-state="{{ c.state }}" title="{{ c.fire }}"><span class="state">{{ c.state }}</span>{{ c.fire[11:16] }}Z &middot; {{ c.text }}{% for a in c.alerts %}<br>&#9888; {{ a }}{% endfor %}</td>
{% else %}
<td class="none"></td>
{% endif %}
{% endfor %}
</tr>
{% endfor %}
</tbody>
</table>
</div>
<h2>Legend</h2>
<ul class="legend">{% for name, words in states %}<li><span class="{{ name }}"></span>{{ name }}: {{ words }}</li>{% endfor %}</ul>
<h2>Incidents</h2>
{% if incidents %}
<ul id="incidents">{% for session, i in incidents %}<li data-session="{{ session }}">{{ session }}: {{ i.get("rule", "") }} {{ i.get("key", "") }} &middot; {{ i.get("state", "") }}{% if i.get("opened") %}, opened {{ i.opened }}{% endif %}{% if i.get("resolved") %}, resolved {{ i.resolved }}{% endif %}</li>{% endfor %}</ul>
{% else %}
<p>None in these sessions.</p>
{% endif %}
</body>
</html>
"""
