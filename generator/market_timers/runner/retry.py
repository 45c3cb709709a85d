"""The runner's two ends of a retry (retries.py has the keys, the backoff and the marker): a start
that consumes the marker, and the --record step that leaves it. Imported only for a job with
`retries`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from market_timers.contracts.exitcodes import RETRIES_OVER
from market_timers.runner.start import ERR, INFO, _utc, log, scheduled_instant


def retry_start(env: dict, state_dir: str, job: str, session: str, scheduled: datetime,
                grace: int) -> tuple[int, int | None]:
    """(attempt, None) to run, or (attempt, RETRIES_OVER) to refuse; see retries.py.

    A start that finds the `retry N` marker written by the previous attempt's --record is
    systemd's restart: it claims the ledger's next attempt as "retry" (no "already ran", no grace
    check: its bound is scheduled + grace + timeout) after waiting the exponential part of the
    backoff. An `over` marker ends the retries."""
    from market_timers.runner import retries

    marker = retries.take_marker(state_dir, job, session)
    if marker is None:
        return 1, None
    verb, n, reason = marker
    if verb == "over":
        log(ERR, f"{job} for session {session}: not retried again ({reason})")
        return n, RETRIES_OVER
    delay = int(env.get("MARKET_RETRY_DELAY_SEC", "30"))
    extra = retries.backoff(n, delay, int(env.get("MARKET_RETRY_DELAY_MAX_SEC", "600"))) - delay
    deadline = scheduled + timedelta(seconds=grace + int(env.get("MARKET_TIMEOUT_SEC", "1800")))
    if datetime.now(UTC) + timedelta(seconds=max(extra, 0)) > deadline:
        log(ERR, f"{job} for session {session}: attempt {n} would start after "
                 f"{_utc(deadline)} (instant + grace + timeout); not retried")
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
    from market_timers.runner import retries

    status = env.get("EXIT_STATUS", "")
    if env.get("SERVICE_RESULT") == "success" or status in ("170", "171", "172", "173", "174",
                                                                "175"):
        retries.clear_marker(state_dir, job, session)  # not restarted (success, or refused)
        return
    allowed = int(env["MARKET_RETRIES"])
    delay = int(env.get("MARKET_RETRY_DELAY_SEC", "30"))
    wait = retries.backoff(attempt + 1, delay, int(env.get("MARKET_RETRY_DELAY_MAX_SEC", "600")))
    deadline = scheduled_instant(env, now) + timedelta(
        seconds=int(env.get("MARKET_GRACE_SEC", "120")) + int(env.get("MARKET_TIMEOUT_SEC", "0")))
    if attempt > allowed:
        text = f"over {attempt} all {attempt} attempts failed"
    elif now + timedelta(seconds=wait) > deadline:
        text = (f"over {attempt} attempt {attempt + 1} would start past instant + grace + "
                "timeout")
    else:
        text = f"retry {attempt + 1}"
    retries.write_marker(state_dir, job, session, text)
    log(INFO, f"{job} for session {session}: attempt {attempt} failed; {text}")
