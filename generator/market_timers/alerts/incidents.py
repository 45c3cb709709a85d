"""What one incident is: the occurrence, not the job (issue 45).

A job's outcome alert is keyed on (reason, job, session[, slot]): repeats fold into an earlier
alert only when all are the same (a periodic job's slot is part of it: the 14:31 slot's failure
is not the 14:30 slot's), so a new session's failure is always a new incident and always sent,
even inside the dedup window of an earlier one (recovered or not). A success resolves the open
incidents of its own session and of older sessions, never a newer session's; a `try` (session
`try-<UTC time>`) resolves nothing and its failure is an incident of its own.
"""

from __future__ import annotations

TRY_PREFIX = "try-"


def incident_key(kind: str, job: str, session: str, slot: str = "") -> str:
    """The dedup key of a job's outcome alert: `<kind>:<job>:<session>[:<slot>]`."""
    return f"{kind}:{job}:{session}" + (f":{slot}" if slot else "")


def occurrence(session: str, slot: str = "") -> str:
    """What a job's open incidents are kept under: the session, or `<session> slot <slot UTC>`
    for a periodic job's slot (the text orders as the instants do, a session's slots after it)."""
    return f"{session} slot {slot}" if slot else session


def is_try(session: str) -> bool:
    return session.startswith(TRY_PREFIX)


def resolves(success_session: str, open_session: str) -> bool:
    """A success of `success_session` resolves the incident of `open_session`: the same session
    (slot) or an older one (occurrences are ISO texts: their order is the text's); a try never
    does."""
    if is_try(success_session) or is_try(open_session):
        return False
    return open_session <= success_session
