"""The human table of `market-timers plan`, its `--summary` and its `--json` entries."""

from __future__ import annotations

from datetime import UTC

from . import calendars
from .config import Config
from .durations import format_offset
from .instants import iso
from .plan import Fire


def _rows(fires: list[Fire]):
    """(fire, instant) per row: a periodic fire gives one row per slot."""
    for f in fires:
        if f.is_periodic:
            for slot in f.slots:
                yield f, slot
        else:
            yield f, f.fire_utc


def _what(f: Fire) -> str:
    if f.is_daily:
        return "daily"
    if f.is_periodic:
        return f"every {format_offset(f.every)[1:]}"
    return f"{f.event} {format_offset(f.offset)}"


def table(fires: list[Fire], config: Config) -> str:
    if not fires:
        return "no fires planned in this window"
    rows = [("JOB", "CALENDAR", "SESSION", "EVENT", "UTC", "EXCHANGE LOCAL")]
    for f, instant in _rows(fires):
        local = instant if f.is_daily else instant.astimezone(calendars.tz(f.calendar))
        rows.append((f.job, f.calendar, f.session.isoformat(), _what(f),
                     instant.strftime("%a %Y-%m-%d %H:%M:%S"),
                     f"{local:%a %H:%M:%S} {local.tzname()}"))
    return _align(rows)


def summary(fires: list[Fire]) -> str:
    """`plan --summary`: one line per (job, session): first, last, count."""
    if not fires:
        return "no fires planned in this window"
    rows = [("JOB", "CALENDAR", "SESSION", "EVENT", "FIRST (UTC)", "LAST (UTC)", "COUNT")]
    for f in fires:
        rows.append((f.job, f.calendar, f.session.isoformat(), _what(f),
                     f"{f.fire_utc:%a %Y-%m-%d %H:%M:%S}", f"{f.last_utc:%a %Y-%m-%d %H:%M:%S}",
                     str(len(f.slots) if f.is_periodic else 1)))
    return _align(rows)


def json_entries(fires: list[Fire]) -> list[dict]:
    """`plan --json`: one entry per fire; a periodic job's, one per slot with `slot` its instant."""
    out = []
    for f, instant in _rows(fires):
        entry = f.to_json()
        if f.is_periodic:
            local = instant.astimezone(UTC if f.is_daily else calendars.tz(f.calendar))
            entry.update(slot=iso(instant), fire_utc=iso(instant), fire_local=local.isoformat())
        out.append(entry)
    return out


def _align(rows: list[tuple]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    return "\n".join(lines)
