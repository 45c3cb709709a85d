"""`requires`: whether each job a start requires succeeded in the same session.

The unit carries the names (MARKET_REQUIRES, comma-separated, written by render.py); the answer
comes from the run ledger the start already opened (the local files, or the cluster ledger's
rows of every node): each upstream's attempts and refused starts for this session. A few file
reads on the local ledger, one query per upstream on the cluster's; standard library only (the
runner's hot path).

An upstream's state is ledger/sessionstate.py's phrase (succeeded, failed (exit N), still
running, refused (KIND), missed).
"""

from market_timers.contracts import environment
from market_timers.contracts.exitcodes import REQUIRES_UNMET
from market_timers.ledger.sessionstate import SUCCEEDED, state
from market_timers.runner.start import ERR, log


def first_unmet(book, names: str, session: str) -> tuple[str, str] | None:
    """(upstream, its state) of the first required job that did not succeed, or None."""
    for name in names.split(","):
        name = name.strip()
        if name:
            found = state(book, name, session)
            if found != SUCCEEDED:
                return name, found
    return None


def refuse_unmet(start) -> int | None:
    """The start's gate `requires_met` (runner/gates.py): REQUIRES_UNMET (176) when a
    required job did not succeed in this session, with the refusal noted (no claim: `market-timers
    run --session` runs it once the upstream has succeeded); None when every one did."""
    env, key = start.env, start.key
    try:
        unmet = first_unmet(start.book, env[environment.REQUIRES], key.session)
    except OSError as e:
        unmet = (env[environment.REQUIRES], f"unreadable ({e})")
    if unmet is None:
        return None
    upstream, upstream_state = unmet
    log(ERR, f"requires unmet: {start.what} requires {upstream}, which did not succeed in "
             f"session {key.session}: {upstream_state}; not running it. Once {upstream} has succeeded: "
             f"market-timers run {key.job} --session {key.session}")
    return start.refused("requires-unmet", REQUIRES_UNMET, upstream=upstream,
                         upstream_state=upstream_state)
