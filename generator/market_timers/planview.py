"""The human table of `market-timers plan`."""

from __future__ import annotations

from .config import Config
from .durations import format_offset
from .plan import Fire


def table(fires: list[Fire], config: Config) -> str:
    if not fires:
        return "no fires planned in this window"
    rows = [("JOB", "CALENDAR", "SESSION", "EVENT", "UTC", "EXCHANGE LOCAL")]
    for f in fires:
        local = f.local()
        rows.append((f.job, f.calendar, f.session.isoformat(),
                     "daily" if f.is_daily else f"{f.event} {format_offset(f.offset)}",
                     f.fire_utc.strftime("%a %Y-%m-%d %H:%M:%S"),
                     f"{local:%a %H:%M:%S} {local.tzname()}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    return "\n".join(lines)
