"""What the runner made of a start an operator asked for (`run`, `try`): it ran the job, or it
refused the start (one row of the outcome table), read from the run ledger under the unit's
invocation id once the runner has judged it. Bounded: a start not judged within the wait is told
as not decided yet, never guessed from the unit's exit status (a job's own 178 is not a halt).
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
        return Verdict("ran")
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
