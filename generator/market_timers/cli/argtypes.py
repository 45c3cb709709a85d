"""The types of the command line's arguments: each turns the text given into its value, or says
what was expected (argparse prints it with the usage).
"""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime


def session_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date YYYY-MM-DD: {text!r}") from None


def utc_instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO instant: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the zone, e.g. {text}Z")
    return value.astimezone(UTC)


def whole_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if not 1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"from 1 to 3600 seconds: {text!r}")
    return value
