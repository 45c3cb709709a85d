"""What a session day looks like to the operator, read from the plan alone (the dead-man's page
refresh must not build the exchange calendars): its weekday, the exchange-local time of each fire,
and whether it closes early or opens late.

An early close (late open) is a close earlier (open later) than the one most of the plan's sessions
of that calendar have: the plan holds the horizon's sessions, ordinary days among them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from market_timers.schema.durations import parse_offset


@dataclass(frozen=True)
class Day:
    calendar: str
    session: str
    weekday: str  # "Fri"
    open_local: str = ""  # "09:30 EST", "" when no job of the plan is tied to the open
    close_local: str = ""
    early_close: bool = False
    late_open: bool = False

    def marks(self) -> list[str]:
        return ([f"closes early at {self.close_local}"] if self.early_close else []) + (
            [f"opens late at {self.open_local}"] if self.late_open else [])


def weekday(session: str) -> str:
    try:
        return f"{date.fromisoformat(session):%a}"
    except ValueError:  # a try-<time> or a daily job's label
        return ""


def local_hm(entry: dict, key: str = "fire_local") -> str:
    """"09:31 EST": a fire's exchange-local time of day and zone, from the plan entry."""
    text = entry.get(key) or ""
    return f"{text[11:16]} {entry.get('timezone') or ''}".strip() if text else ""


def local_last(entry: dict) -> str:
    """A periodic fire's last slot in exchange time ("15:40"), from its first slot's offset."""
    first, last = entry.get("fire_local"), entry.get("last_utc")
    if not first or not last:
        return ""
    zone = datetime.fromisoformat(first).tzinfo
    return f"{datetime.fromisoformat(last.replace('Z', '+00:00')).astimezone(zone):%H:%M}"


def _event_local(entry: dict) -> datetime | None:
    """The session's event (open, close) in exchange time: the fire less its offset."""
    try:
        fire = datetime.fromisoformat(entry["fire_local"])
        return fire - timedelta(seconds=parse_offset(entry.get("offset") or "0s"))
    except (KeyError, ValueError, TypeError):
        return None


def session_days(fires: list[dict]) -> dict[tuple[str, str], Day]:
    """(calendar, session) -> its Day, for every session of the plan's fires."""
    events: dict[tuple[str, str], dict[str, str]] = {}
    for e in fires:
        key = (e.get("calendar", ""), e["session"])
        if e.get("event") not in ("open", "close") or e["event"] in events.get(key, ()) \
                or (at := _event_local(e)) is None:
            continue  # a session's event is the same for each of its jobs: read from the first
        events.setdefault(key, {})[e["event"]] = f"{at:%H:%M} {e.get('timezone') or ''}".strip()
    usual = {}
    for event in ("open", "close"):
        for cal in {c for c, _ in events}:
            seen = Counter(v[event][:5] for (c, _), v in events.items()
                           if c == cal and event in v)  # the time of day: EST and EDT alike
            usual[(cal, event)] = seen.most_common(1)[0][0] if seen else ""
    days = {}
    for e in fires:
        key = (e.get("calendar", ""), e["session"])
        if key in days:
            continue
        got = events.get(key, {})
        opens, closes = got.get("open", ""), got.get("close", "")
        days[key] = Day(key[0], key[1], weekday(key[1]), opens, closes,
                        early_close=bool(closes) and closes[:5] < usual[(key[0], "close")],
                        late_open=bool(opens) and opens[:5] > usual[(key[0], "open")])
    return days
