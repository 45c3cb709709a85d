"""What a run record says, for the metrics: every start in the run ledger (ledger_runs), its
kind of result (run_kind), its exit status as a number, its times as epoch seconds."""

from __future__ import annotations

import contextlib
import os
import signal
from datetime import UTC, datetime
from pathlib import Path

from .. import runrecord


def result_kinds() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every kind of result, the failure kinds among them)."""
    from ..alerts.classify import FAILURE_KINDS

    failures = (*FAILURE_KINDS, "overlap-skipped")
    return ("ok", *failures), failures


def run_kind(record: dict) -> str:
    """ok, one of the alert layer's failure kinds, or overlap-skipped."""
    from ..alerts.classify import classify

    refused = record.get("refused")
    if refused in ("stale-start", "overlap-skipped") and not record.get("exit_status"):
        return refused
    return classify(str(record.get("result") or ""), str(record.get("exit_code") or ""),
                    str(record.get("exit_status") or ""))


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


def ledger_runs(state_dir: Path) -> list[dict]:
    """Every start in the run ledger, attempts and refused starts alike (a forced re-run is
    attempt 2 of its session, a refused start a note beside the attempt), plus the records of
    runs from before the ledger."""
    from ..ledger.local import LocalLedger

    book = LocalLedger(os.fspath(state_dir))
    out, seen = [], set()
    for key in book.keys():
        seen.add((key.job, key.session))
        try:
            entries = book.attempts(key) + book.refusals(key)
        except OSError:
            continue
        out += [{**e, "job": key.job, "session": key.session} for e in entries]
    out += [r for r in runrecord.all_records(state_dir)
            if (r["job"], r["session"]) not in seen]
    return out
