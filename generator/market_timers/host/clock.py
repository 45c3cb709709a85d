"""The host's wall clock, as every flow reads "now": aware UTC, whole seconds."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)
