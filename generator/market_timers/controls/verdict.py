"""What the runner made of a start an operator asked for (`run`, `try`): it ran the job, or it
refused the start (one row of the outcome table), read from the run ledger under the unit's
invocation id once the runner has judged it. Bounded: a start not judged within the wait is told
as not decided yet, never guessed from the unit's exit status (a job's own 178 is not a halt).
`try --wait` then waits for the run's end and tells its outcome (`await_end`, `tell_end`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from market_timers.contracts import outcomes

POLL_SEC = 0.2
PROPS = ("InvocationID", "ActiveState", "Result", "ExecMainStatus")


@dataclass
class Verdict:
    state: str  # "ran", "refused", "ended" (no judgement recorded) or "pending"
    kind: str = ""  # refused: the outcome's name (contracts/outcomes.py)
    record: dict | None = None
    invocation: str = ""  # ran: the unit's invocation that ran the job

    def refusal(self, job: str, session: str) -> str:
        """`refused: <kind>: <the outcome's title>` and the refusal's own reason, if any."""
        head = f"refused: {self.kind}: {outcomes.title(self.kind, job, session)}"
        why = [f"{k} {self.record[k]}" for k in ("reason", "scope", "note")
               if self.record and self.record.get(k)]
        return head + (f" ({'; '.join(why)})" if why else "")


def judged(book, key, invocation: str) -> Verdict | None:
    """The runner's judgement of the start `invocation`, as the ledger holds it, or None."""
    for refused in book.refusals(key):
        if refused.get("invocation") == invocation:
            return Verdict("refused", str(refused.get("refused") or "refused"), refused)
    if any(a.get("invocation") == invocation for a in book.attempts(key)):
        return Verdict("ran", invocation=invocation)
    return None


def await_verdict(book, key, unit: str, systemctl, wait_sec: float,
                  clock=time.monotonic, sleep=time.sleep) -> Verdict:
    """Poll until the runner of `unit` has judged its start, the unit ended without a judgement,
    or `wait_sec` is over (pending)."""
    deadline = clock() + wait_sec
    while True:
        props = systemctl.show([unit], PROPS).get(unit, {})
        invocation = props.get("InvocationID", "")
        if invocation:
            found = judged(book, key, invocation)
            if found is not None:
                return found
            if props.get("ActiveState") in ("inactive", "failed"):
                return Verdict("ended", record=props)
        if clock() >= deadline:
            return Verdict("pending")
        sleep(POLL_SEC)


def tell_unjudged(command: str, unit: str, verdict: Verdict, wait_sec: float) -> int:
    """Say what is known of a start the ledger holds no judgement of: 0 while it may still come,
    1 when the unit ended without one (it failed before the runner could judge it)."""
    if verdict.state == "pending":
        print(f"market-timers {command}: {unit} was started; the runner has not judged it within "
              f"{wait_sec:g} s: see `journalctl -u {unit}`", file=sys.stderr)
        return 0
    props = verdict.record or {}
    print(f"market-timers {command}: {unit} ended before the runner judged its start "
          f"(Result={props.get('Result', '?')}, exit status {props.get('ExecMainStatus', '?')}):"
          f" see `journalctl -u {unit}`", file=sys.stderr)
    return 1


def await_end(book, key, unit: str, invocation: str, systemctl, wait_sec: float,
              clock=time.monotonic, sleep=time.sleep) -> str | None:
    """The outcome (its name) of the run `invocation` once it has ended: from the ledger, where
    the record step wrote how it ended, else from the unit's Result once it is inactive; None
    when it is still running after `wait_sec`."""
    deadline = clock() + wait_sec
    while True:
        attempt = next((a for a in book.attempts(key) if a.get("invocation") == invocation), {})
        if attempt.get("result"):
            return outcomes.classify(str(attempt["result"]), str(attempt.get("exit_code") or ""),
                                     str(attempt.get("exit_status") or ""),
                                     success=attempt["result"] == "success", ran=True)
        props = systemctl.show([unit], PROPS).get(unit, {})
        if props.get("InvocationID") == invocation and \
                props.get("ActiveState") in ("inactive", "failed"):  # no record step's word
            result = props.get("Result", "")
            return outcomes.classify(result, "", props.get("ExecMainStatus", ""),
                                     success=result == "success", ran=True)
        if clock() >= deadline:
            return None
        sleep(POLL_SEC)


def tell_end(book, key, unit: str, kind: str | None, wait_sec: float) -> int:
    """Say how the run ended, in the outcome table's words: 0 for ok, 1 otherwise (and 1 for a
    run still going after the wait, past its timeout: see its journal)."""
    if kind is None:
        print(f"market-timers try: {unit} is still running {wait_sec:g} s after its start "
              f"(past its timeout): see `journalctl -u {unit}`", file=sys.stderr)
        return 1
    row = outcomes.BY_NAME.get(kind)
    words = row.brief if row is not None and not row.title else outcomes.title(
        kind, key.job, key.session, _status_of(book, key))
    print(f"{key.job} ended: {kind}: {words} ({unit})", file=sys.stdout if kind == "ok"
          else sys.stderr)
    return 0 if kind == "ok" else 1


def _status_of(book, key) -> str:
    """The last attempt's exit status (or signal) for the outcome's title."""
    attempts = book.attempts(key)
    return str(attempts[-1].get("exit_status") or "") if attempts else ""
