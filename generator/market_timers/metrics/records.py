"""What a run record says, for the metrics: its kind of result (run_kind), its exit status as a
number, its times as epoch seconds, its key in the history (run_key)."""

from __future__ import annotations

import contextlib
import signal
from datetime import UTC, datetime

from market_timers.contracts.outcomes import METRIC_KINDS, classify


def result_kinds() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every kind of result, the failure kinds among them): the outcome table's metric labels."""
    return METRIC_KINDS, METRIC_KINDS[1:]


def run_kind(record: dict) -> str:
    """ok, or another of the outcome table's metric labels: a refused start's own kind when it
    has one, else what its result says."""
    refused = record.get("refused")
    if refused in METRIC_KINDS and not record.get("exit_status"):
        return refused
    return classify(str(record.get("result") or ""), str(record.get("exit_code") or ""),
                    str(record.get("exit_status") or ""), ran=job_ran(record))


def job_ran(record: dict) -> bool:
    """The record is an attempt the runner did not refuse: its exit status is the job's own."""
    return "attempt" in record and not record.get("refused")


def exit_status_number(record: dict) -> int | None:
    """$EXIT_STATUS as a number: the exit status, or 128 + the signal's number (shell style)."""
    status = str(record.get("exit_status") or "").strip()
    if status.isdigit():
        return int(status)
    if status:
        name = status if status.startswith("SIG") else f"SIG{status}"
        with contextlib.suppress(KeyError):
            return 128 + signal.Signals[name].value
    return None


def epoch_seconds(text: str | None) -> float | None:
    """An ISO 8601 time (UTC when it has no zone) as epoch seconds; None when absent or bad."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def is_finished(record: dict) -> bool:
    return bool(record.get("finished_utc"))


def run_key(record: dict) -> str:
    """The run's key in the history: its systemd invocation, else what identifies the start."""
    return record.get("invocation") or (
        f"{record['job']}|{record['session']}|{record.get('started_utc', '')}|"
        f"{record.get('attempt') or record.get('refused') or ''}")
