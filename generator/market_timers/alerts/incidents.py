"""What one incident is: the occurrence, not the job (issue 45).

A job's outcome alert is keyed on (reason, job, session): repeats fold into an earlier alert only
when all three are the same, so a new session's failure is always a new incident and always sent,
even inside the dedup window of an earlier one (recovered or not). A success resolves the open
incidents of its own session and of older sessions, never a newer session's; a `try` (session
`try-<UTC time>`) resolves nothing and its failure is an incident of its own.
"""

from __future__ import annotations

TRY_PREFIX = "try-"


def incident_key(kind: str, job: str, session: str) -> str:
    """The dedup key of a job's outcome alert: `<kind>:<job>:<session>`."""
    return f"{kind}:{job}:{session}"


def is_try(session: str) -> bool:
    return session.startswith(TRY_PREFIX)


def resolves(success_session: str, open_session: str) -> bool:
    """A success of `success_session` resolves the incident of `open_session`: the same session
    or an older one (session ids are ISO dates: their order is the text's); a try never does."""
    if is_try(success_session) or is_try(open_session):
        return False
    return open_session <= success_session
