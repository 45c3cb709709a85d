"""Retries of idempotent jobs: the config keys and the backoff (the marker between attempts is the
runner's, runner/retry.py; the final alert's text is alerts/handler.py).

    [[job]]
    name = "prices"
    retries = 2              # attempts after the first failure (default 0: never retried)
    retry_delay = "30s"      # before the 2nd attempt; doubled each time...
    retry_delay_max = "5min" # ...up to this cap

    [[job]]
    name = "closing-orders"
    orders = true            # sends orders: never retried, nor any job sharing its lock group

How (systemd 252): the job's unit gets `Restart=on-failure`, `RestartSec=<retry_delay>`,
`RestartPreventExitStatus=170 171 172 173 174 175 176 177 178 179` (the runner's refusals are never retried) and, as a
backstop, `StartLimitBurst=retries+2` within `StartLimitIntervalSec=` the retry window. systemd
252 does not run OnFailure= while a restart is pending; 254 and later do (RestartMode=direct, which
252 does not know, would stop it), so the failure handler itself stays quiet while the unit waits
to restart or runs the next attempt (alerts/handler.py `retry_pending`): a failed attempt alerts
nobody on either release. The
exponential part of the backoff is the runner's: systemd 252 only knows a fixed RestartSec=
(RestartSteps= and RestartMaxDelaySec= arrived in 254), so a retry start sleeps
min(delay * 2^(n-2), cap) - delay before it execs the job.

Each systemd restart is a new invocation with the same environment, so the attempt number travels
in a marker, `<state_dir>/runs/<job>/<session>.retry`, written by the attempt's
`ExecStopPost=market-timers-run --record`:

    retry N        the failed attempt N-1 may be retried: the next start is attempt N;
    over N REASON  no more: attempts used up, or the next one would start past
                   scheduled + grace + timeout. The next start (systemd's restart) exits 174
                   at once, and the unit fails: ONE alert, "... after N attempts", with the last
                   attempt's own result (kept in the run record).

The runner consumes the marker (rename, then read): a start with no marker is a timer's start
(and, the session having run, "already ran", 173). A start that consumed `retry N` claims the run
ledger's next attempt with how="retry": the ledger grants it only when the latest attempt has
finished without success, so a retry is attempt N of the same (job, session), never refused as
"already ran" and never taken by a second timer start.

Why `orders`: a retry re-runs the job later, inside grace + timeout. An order sender retried
blindly may send its orders twice; and a retried job holding a lock group shared with an order
sender can make that sender's run be skipped (the lock is busy: the run is dropped, never
queued) at its own instant. So `retries` is refused on a job marked `orders = true` and on any
job whose lock group contains one.

Import-light (the runner uses `backoff`): nothing at the top.
"""

from __future__ import annotations

MAX_RETRIES = 10
REFUSALS = "170 171 172 173 174 175 176 177 178 179"  # the runner's own exit codes: never retried


def backoff(attempt: int, delay: int, cap: int) -> int:
    """Seconds to wait before attempt `attempt` (2, 3...): delay, 2*delay, 4*delay... <= cap."""
    return min(delay * 2 ** max(attempt - 2, 0), max(cap, delay))


def window(grace: int, timeout: int, retries: int, delay: int, cap: int) -> int:
    """StartLimitIntervalSec=: every attempt, its wait and the final refusing start fit in it."""
    waits = sum(backoff(n, delay, cap) for n in range(2, retries + 3))
    return grace + (retries + 1) * timeout + waits + 60


def _retries(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        from market_timers.schema.table import Bad

        raise Bad(f"a whole number from 0 to {MAX_RETRIES} (attempts after the first failure)")
    return value


def _delay(value) -> int:
    from market_timers.schema.durations import parse_duration

    return parse_duration(value, 6 * 3600, "a retry waits at most 6h")


def keys() -> tuple:
    """The retry keys of a [[job]] table (config/jobs.py puts them in its Table)."""
    from market_timers.schema.table import Key
    from market_timers.schema.values import flag

    return (
        Key("retries", _retries, 0, "attempts after the first failure (default 0: never)"),
        Key("retry_delay", _delay, 30, "the wait before the second attempt, doubled each time"),
        Key("retry_delay_max", _delay, 600, "the longest wait between attempts"),
        Key("orders", flag, False, "the job sends orders: never retried, nor its lock group"),
    )


def check_retries(kept: dict, t: dict, path: str, problems) -> None:
    """The retry keys of one [[job]] table against each other (each key: its Key row)."""
    if kept["retry_delay_max"] < kept["retry_delay"]:
        problems.add(f"{path}.retry_delay_max", "must be at least retry_delay",
                     t.get("retry_delay_max"))
    if kept["orders"] and kept["retries"]:
        problems.add(f"{path}.retries", "a job that sends orders (orders = true) is never "
                     "retried: a blind retry can send its orders twice", t.get("retries", 0))


def check_order_groups(raw_jobs: list, jobs: list, problems) -> None:
    """Refuse `retries` on a job whose lock group holds a job marked `orders = true`."""
    from market_timers.config.jobpath import paths_by_name  # the runner imports this module

    senders: dict[str, list[str]] = {}
    for j in jobs:
        if j.orders:
            senders.setdefault(j.lock, []).append(j.name)
    paths = paths_by_name(raw_jobs)
    for j in jobs:
        others = [n for n in senders.get(j.lock, []) if n != j.name]
        if j.retries and others:
            problems.add(f"{paths.get(j.name, 'job.' + j.name)}.retries", f"lock group {j.lock!r} is "
                         f"shared with {', '.join(others)} (orders = true): a retry holding the "
                         "group's lock can make that order sender's run be skipped; give this "
                         "job its own lock group or no retries", j.retries)
        if j.retries and not j.is_session_job and window(
                j.grace, j.timeout, j.retries, j.retry_delay, j.retry_delay_max) >= 86400:
            problems.add(f"{paths.get(j.name, 'job.' + j.name)}.retries", "a daily job's attempts "
                         "(grace + (retries+1) x timeout + delays) must fit in a day", j.retries)
