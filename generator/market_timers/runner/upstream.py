"""`requires`: whether each job a start requires succeeded in the same session.

The unit carries the names (MARKET_REQUIRES, comma-separated, written by render.py); the answer
comes from the run ledger the start already opened (the local files, or the cluster ledger's
rows of every node): each upstream's attempts and refused starts for this session. A few file
reads on the local ledger, one query per upstream on the cluster's; standard library only (the
runner's hot path).

An upstream's state is ledger/sessionstate.py's phrase (succeeded, failed (exit N), still
running, refused (KIND), missed). With `requires_wait` (MARKET_REQUIRES_WAIT_SEC) a start waits,
bounded, for an upstream still running or not started yet (two jobs at one instant, chained);
when the wait runs out the start is refused as it would have been without it.
"""

import time
from datetime import UTC, datetime

from market_timers.contracts import environment
from market_timers.contracts.exitcodes import REQUIRES_UNMET
from market_timers.ledger.sessionstate import NEVER_STARTED, RUNNING, SUCCEEDED, state
from market_timers.runner.start import ERR, WARNING, log

POLL_SEC = 0.5  # a few file reads (one query per upstream on the cluster's ledger) per look
CLAIM_ROOM_SEC = 5  # on the cluster ledger: the claim still needs its steps before the deadline


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
    run --session` runs it once the upstream has succeeded); None when every one did. With
    MARKET_REQUIRES_WAIT_SEC, an upstream still running or not yet started is waited for."""
    env, key = start.env, start.key
    try:
        unmet = first_unmet(start.book, env[environment.REQUIRES], key.session)
        if unmet is not None and _undecided(unmet[1]) and env.get(environment.REQUIRES_WAIT_SEC):
            unmet = _wait(start, unmet)
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


def _undecided(upstream_state: str) -> bool:
    """Still running, or not started yet: what a wait may see end in success."""
    return upstream_state.startswith((RUNNING, NEVER_STARTED))


def _wait(start, unmet: tuple[str, str]) -> tuple[str, str] | None:
    """Poll the ledger until every upstream succeeded (None), one ended otherwise, or the wait
    is over: MARKET_REQUIRES_WAIT_SEC, and never past the instant + grace of a timer's start
    (it would be stale) nor the cluster ledger's own deadline for its steps."""
    env, key = start.env, start.key
    wait = int(env[environment.REQUIRES_WAIT_SEC])
    until = time.time() + wait
    if start.how == "timer":
        until = min(until, start.scheduled.timestamp() + start.grace)
    if getattr(start.book, "deadline", None):
        until = min(until, start.book.deadline - CLAIM_ROOM_SEC)
    log(WARNING, f"{start.what} waits up to {wait} s for {unmet[0]} ({unmet[1]}): "
                 "requires_wait")
    while unmet is not None and _undecided(unmet[1]) and time.time() < until:
        time.sleep(max(0.0, min(POLL_SEC, until - time.time())))
        unmet = first_unmet(start.book, env[environment.REQUIRES], key.session)
    start.now = datetime.now(UTC)  # the claim's lateness counts the wait
    start.late = (start.now - start.scheduled).total_seconds()
    return unmet
