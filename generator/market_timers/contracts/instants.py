"""The one text form of an instant in market-timers: UTC, to the second, `YYYY-MM-DDTHH:MM:SSZ`.

Used in plan.json, run records, alerts and `plan --json`. (The runner spells the format out itself
and parses with fromisoformat: it is on the hot path and imports as little as it can.)
"""

from __future__ import annotations

from datetime import UTC, datetime

ISO_Z = "%Y-%m-%dT%H:%M:%SZ"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime(ISO_Z)


def parse_iso(text: str) -> datetime:
    return datetime.strptime(text, ISO_Z).replace(tzinfo=UTC)
