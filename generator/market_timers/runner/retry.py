"""The runner's two ends of a retry (config/retries.py has the keys and the backoff): a start
that consumes the marker `<state_dir>/runs/<job>/<session>.retry`, and the --record step that
leaves it (the marker's format: config/retries.py's docstring). Imported only for a job with
`retries`.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import RETRIES_OVER
from market_timers.runner.start import ERR, INFO, log, scheduled_instant, utc_text


def retry_start(env: dict, state_dir: str, job: str, session: str, scheduled: datetime,
                grace: int) -> tuple[int, int | None]:
    """(attempt, None) to run, or (attempt, RETRIES_OVER) to refuse; see retries.py.

    A start that finds the `retry N` marker written by the previous attempt's --record is
    systemd's restart: it claims the ledger's next attempt as "retry" (no "already ran", no grace
    check: its bound is scheduled + grace + timeout) after waiting the exponential part of the
    backoff. An `over` marker ends the retries."""
    from market_timers.config import retries

    marker = take_marker(state_dir, job, session)
    if marker is None:
        return 1, None
    verb, n, reason = marker
    if verb == "over":
        log(ERR, f"{job} for session {session}: not retried again ({reason})")
        return n, RETRIES_OVER
    delay = int(env.get(environment.RETRY_DELAY_SEC, "30"))
    extra = retries.backoff(n, delay, int(env.get(environment.RETRY_DELAY_MAX_SEC, "600"))) - delay
    deadline = scheduled + timedelta(seconds=grace + int(env.get(environment.TIMEOUT_SEC, "1800")))
    if datetime.now(UTC) + timedelta(seconds=max(extra, 0)) > deadline:
        log(ERR, f"{job} for session {session}: attempt {n} would start after "
                 f"{utc_text(deadline)} (instant + grace + timeout); not retried")
        return n - 1, RETRIES_OVER
    if extra > 0:
        log(INFO, f"{job} for session {session}: attempt {n} in {extra} s more (backoff)")
        time.sleep(extra)
    log(INFO, f"{job} for session {session}: attempt {n} of {int(env['MARKET_RETRIES']) + 1}")
    return n, None


def plan_retry(env: dict, state_dir: str, job: str, session: str, attempt: int,
               now: datetime) -> None:
    """After an attempt: leave the marker that tells the next start (systemd's restart) what it
    is: `retry N`, or `over N REASON` (see retries.py)."""
    from market_timers.config import retries

    status = env.get("EXIT_STATUS", "")
    if env.get("SERVICE_RESULT") == "success" or status in ("170", "171", "172", "173", "174",
                                                                "175"):
        clear_marker(state_dir, job, session)  # not restarted (success, or refused)
        return
    allowed = int(env[environment.RETRIES])
    delay = int(env.get(environment.RETRY_DELAY_SEC, "30"))
    wait = retries.backoff(attempt + 1, delay, int(env.get(environment.RETRY_DELAY_MAX_SEC, "600")))
    # A run started by hand (`market-timers run`: its unit has a ticket) was late on purpose: its
    # retries are bounded from its own attempts, not from the planned instant.
    base = now if env.get(environment.TICKET) else scheduled_instant(env, now)
    deadline = base + timedelta(
        seconds=int(env.get(environment.GRACE_SEC, "120")) + int(env.get(environment.TIMEOUT_SEC, "0")))
    if attempt > allowed:
        text = f"over {attempt} all {attempt} attempts failed"
    elif now + timedelta(seconds=wait) > deadline:
        text = (f"over {attempt} attempt {attempt + 1} would start past instant + grace + "
                "timeout")
    else:
        text = f"retry {attempt + 1}"
    write_marker(state_dir, job, session, text)
    log(INFO, f"{job} for session {session}: attempt {attempt} failed; {text}")


def marker_path(state_dir: str, job: str, session: str) -> str:
    return ledger.retry_marker_path(state_dir, job, session)


def write_marker(state_dir: str, job: str, session: str, text: str) -> None:
    from market_timers.files import (  # here, not on top: only --record writes, the start reads
        atomicfile,
    )

    atomicfile.write(marker_path(state_dir, job, session), text + "\n", mode=0o640,
                     sync=atomicfile.DURABLE, make_dirs=True)


def clear_marker(state_dir: str, job: str, session: str) -> None:
    try:
        os.unlink(marker_path(state_dir, job, session))
    except FileNotFoundError:
        pass


def take_marker(state_dir: str, job: str, session: str) -> tuple[str, int, str] | None:
    """Consume the marker: ("retry", N, "") or ("over", N, reason); None when there is none."""
    path = marker_path(state_dir, job, session)
    taken = f"{path}.taken{os.getpid()}"
    try:
        os.rename(path, taken)  # of two starts, one gets it
    except FileNotFoundError:
        return None
    try:
        with open(taken, encoding="utf-8") as f:
            words = f.read().split(maxsplit=2)
    finally:
        os.unlink(taken)
    try:
        verb, n = words[0], int(words[1])
    except (IndexError, ValueError):
        return None
    return (verb, n, words[2].strip() if len(words) > 2 else "") if verb in ("retry", "over") \
        else None
