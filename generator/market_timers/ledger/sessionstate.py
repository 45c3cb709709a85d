"""How a (job, session) stands in the run ledger, in one phrase: what the runner's `requires`
check tells (runner/upstream.py) and what a backfill reports for each run it waited for
(controls/backfill.py). Standard library only: the runner's hot path reads it.

    succeeded                    its latest attempt ended with the Result "success" (exit 0: a
                                 job killed by SIGTERM is "signal", runner/record.py)
    failed (exit N)              its latest attempt ended otherwise (killed, timed out...)
    still running                its latest attempt started and has not ended yet
    refused (KIND)               it never ran: its start was refused (stale-start, paused...)
    missed (it never started)    nothing in the ledger for the session
"""

from market_timers.ledger import Key

SUCCEEDED = "succeeded"
RUNNING = "still running"
NEVER_STARTED = "missed (it never started)"


def state(book, job: str, session: str) -> str:
    key = Key(job, session)
    attempts = book.attempts(key)
    if attempts:
        last = attempts[-1]
        result = str(last.get("result") or "")
        if not result:
            return f"{RUNNING} (started {last.get('started_utc', '?')} on host " \
                   f"{last.get('host', '?')})"
        if result == "success":
            return SUCCEEDED
        status = str(last.get("exit_status") or "")
        if result == "exit-code":
            return f"failed (exit {status})" if status else "failed"
        return f"failed ({result}{f' {status}' if status else ''})"
    refusals = book.refusals(key)
    if refusals:
        return f"refused ({refusals[-1].get('refused', '?')})"
    return NEVER_STARTED
