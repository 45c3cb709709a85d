"""The report of `market-timers check-cron`: its result as text or as JSON (cron/check.py)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from market_timers.contracts.instants import iso
from market_timers.schema.durations import format_offset

if TYPE_CHECKING:  # pragma: no cover
    from market_timers.cron.check import CronCheckResult


def hm_local(t: datetime) -> str:
    """A time of day and its zone's abbreviation: "15:45 EST"."""
    return f"{t:%H:%M} {t.tzname()}"


def to_json(result: CronCheckResult) -> dict:
    return {
        "expr": result.expr,
        "tz": result.tz,
        "calendar": result.calendar,
        "event": result.event,
        "offset": format_offset(result.offset_seconds),
        "offset_seconds": result.offset_seconds,
        "from": result.start.isoformat(),
        "to": result.end.isoformat(),
        "fires": result.fires,
        "on_time": result.on_time,
        "no_session": result.no_session,
        "other_time": result.other_time,
        **({"job": result.job, "not_chosen": result.not_chosen} if result.job else {}),
        "wrong_fires": [
            {
                "kind": w.kind,
                "fire_utc": iso(w.fire_utc),
                "fire_local": w.fire_local.isoformat(),
                "local_date": w.fire_local.date().isoformat(),
                "session": w.session.isoformat() if w.session else None,
                "expected_utc": iso(w.expected_utc) if w.expected_utc else None,
                "calendar_says": w.calendar_says(),
            }
            for w in result.wrong
        ],
    }


def format_text(result: CronCheckResult) -> str:
    r = result
    job = f"job {r.job}: " if r.job else ""
    lines = [
        f"cron {r.expr!r} in {r.tz} vs {job}{r.calendar} {r.event} "
        f"{format_offset(r.offset_seconds)}, "
        f"{r.start.isoformat()} 00:00 UTC .. {r.end.isoformat()} 23:59 UTC",
        f"fires: {r.fires}  on time: {r.on_time}  no session: {r.no_session}  "
        f"other time: {r.other_time}" + (f"  not chosen: {r.not_chosen}" if r.job else ""),
    ]
    lines += [f"default: {d}" for d in r.defaults]
    if r.wrong:
        lines.append("")
        lines.append(f"wrong fires ({len(r.wrong)}):")
        for w in r.wrong:
            lines.append(
                f"  {w.fire_utc:%Y-%m-%d %H:%M} UTC = {w.fire_local:%a %Y-%m-%d} "
                f"{hm_local(w.fire_local)}: {w.calendar_says()}"
            )
    elif r.fires:
        lines.append("every fire was on time")
    return "\n".join(lines) + "\n"
