"""`requires`: whether each job a start requires succeeded in the same session.

The unit carries the names (MARKET_REQUIRES, comma-separated, written by render.py); the answer
comes from the run ledger the start already opened (the local files, or the cluster ledger's
rows of every node): each upstream's attempts and refused starts for this session. A few file
reads on the local ledger, one query per upstream on the cluster's; standard library only (the
runner's hot path).

An upstream's state, as the refusal and its alert tell it:
    succeeded                    its latest attempt ended with systemd's Result "success"
    failed (exit N)              its latest attempt ended otherwise (killed, timed out...)
    still running                its latest attempt started and has not ended yet
    refused (KIND)               it never ran: its start was refused (stale-start, paused...)
    missed (it never started)    nothing in the ledger for the session
"""

from market_timers.ledger import Key

SUCCEEDED = "succeeded"


def state(book, job: str, session: str) -> str:
    key = Key(job, session)
    attempts = book.attempts(key)
    if attempts:
        last = attempts[-1]
        result = str(last.get("result") or "")
        if not result:
            return f"still running (started {last.get('started_utc', '?')} on host " \
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
    return "missed (it never started)"


def first_unmet(book, names: str, session: str) -> tuple[str, str] | None:
    """(upstream, its state) of the first required job that did not succeed, or None."""
    for name in names.split(","):
        name = name.strip()
        if name:
            found = state(book, name, session)
            if found != SUCCEEDED:
                return name, found
    return None
