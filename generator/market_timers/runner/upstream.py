"""`requires`: whether each job a start requires succeeded in the same session.

The unit carries the names (MARKET_REQUIRES, comma-separated, written by render.py); the answer
comes from the run ledger the start already opened (the local files, or the cluster ledger's
rows of every node): each upstream's attempts and refused starts for this session. A few file
reads on the local ledger, one query per upstream on the cluster's; standard library only (the
runner's hot path).

An upstream's state is ledger/sessionstate.py's phrase (succeeded, failed (exit N), still
running, refused (KIND), missed).
"""

from market_timers.ledger.sessionstate import SUCCEEDED, state


def first_unmet(book, names: str, session: str) -> tuple[str, str] | None:
    """(upstream, its state) of the first required job that did not succeed, or None."""
    for name in names.split(","):
        name = name.strip()
        if name:
            found = state(book, name, session)
            if found != SUCCEEDED:
                return name, found
    return None
