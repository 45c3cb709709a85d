"""A start by `market-timers run` (manual_run.py): its one-off ticket, consumed by the start's
gate `operator_ticket` (runner/gates.py). Imported only for a start whose unit has one
(MARKET_TICKET): a timer's start never loads it.
"""

import os
from datetime import UTC, datetime

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import RUNNER_ERROR
from market_timers.runner.start import ERR, INFO, log


def take_ticket(start) -> int | None:
    """Consume the ticket: the start becomes the operator's (how "operator", or "forced" with
    --force, `by` who asked), or RUNNER_ERROR when it is unknown, used or missing. systemd's
    restart of a failed `market-timers run` of a job with retries finds its ticket used: the
    retry marker decides, as for a timer's run, with its deadline counted from now (the
    operator's start was late on purpose). OSError: the ledger could not be read."""
    env, key = start.env, start.key
    nonce = ticket_nonce(env)
    ticket = start.book.take_ticket(nonce, key) if nonce else None
    if ticket is None and nonce and env.get(environment.RETRIES, "0") != "0" and \
            retry_pending(env, key):
        start.scheduled = datetime.now(UTC)
    elif ticket is None:
        log(ERR, f"start ticket of {env[environment.TICKET]} ({key.job} for session "
                 f"{key.session}) is {'unknown or already used' if nonce else 'missing'}: "
                 "only a start by `market-timers run` has one; start a run with it")
        return RUNNER_ERROR
    else:
        start.how = "forced" if ticket.get("force") == "yes" else "operator"
        start.by = ticket.get("by", "?")
        log(INFO, f"{key.job} for session {key.session} started by {start.by} with "
                  f"`market-timers run{' --force' if start.how == 'forced' else ''}`")
    return None


def ticket_nonce(env: dict) -> str | None:
    """The nonce of a `market-timers run` start: the credential its one-off unit loads from
    root's file (manual_run.py), never a value of the environment (`systemctl show` shows that to
    anyone, and a unit's Environment= is no proof of who wrote it)."""
    directory = env.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return None
    try:
        fd = os.open(os.path.join(directory, environment.TICKET_CREDENTIAL),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        text = os.read(fd, 256).decode(errors="replace").strip()
    finally:
        os.close(fd)
    return text if text.isalnum() else None


def retry_pending(env: dict, key) -> bool:
    from market_timers.runner.retry import marker_path

    return os.path.exists(marker_path(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR,
                                      key.job, key.session))
