"""A start on the cluster ledger (ledger/postgresql.py) when the ledger fails it. Imported only
then: a start on the local ledger, or one the cluster ledger serves, never loads it.

A start's database steps end by its deadline, instant + grace (60 s from now for the operator's
or a retry's start). Only a connection that cannot be made is "unreachable" ([cluster]
on_db_unreachable: skip, 175, or run on the local ledger). A reached database that stays busy or
silent until the deadline refuses the start as stale (170, DeadlinePassed, the reason in the
journal and so in the alert): never run locally, since another node may hold it; a claim that
was sent without an answer, or completed past the grace, is withdrawn. A clock too far off the
ledger's is 179, no claim. Any other error of a reached ledger is 175 without the local fallback,
and so is a login that cannot work (LoginRefused: a configuration error, issue 44).

An order job (`orders = true`) is never run outside the cluster ledger, whatever
on_db_unreachable says: 175, alerted. Run blind, it could run beside the node that holds the
ledger, and a halt made since this node last looked would not be seen (issue 44). Other jobs
run on the local ledger under the cluster's halts as this node's halt-watch last mirrored them
(ledger/halts.py).
"""

import os
from datetime import UTC, datetime

from market_timers.contracts import environment
from market_timers.contracts.exitcodes import CLOCK_SKEW, LEDGER_UNREACHABLE, STALE_START
from market_timers.ledger import ClockSkewed, DeadlinePassed, LoginRefused, Unreachable
from market_timers.runner.start import ERR, WARNING, local_ledger, log, note_refusal, utc_text


def refuse(start, error, run_again) -> int:
    """The exit status of a start the cluster ledger failed with `error` (a DatabaseError);
    `run_again(start)`: the start sequence, for the local fallback of an unreachable ledger."""
    if isinstance(error, Unreachable):  # no connection could be made
        return unreachable(start, error, run_again)
    if isinstance(error, ClockSkewed):  # the ledger refused the claim: this node's clock is off
        return _clock_skew(start, error)
    if isinstance(error, DeadlinePassed):  # connected, but busy or silent until the deadline
        return _past_deadline(start, error)
    what = start.slot.unreachable_what if start.slot else start.what
    if isinstance(error, LoginRefused):  # credentials missing or refused: fix the node
        log(ERR, f"configuration error: {error}; not running {what}: this node's login to the "
                 "cluster ledger cannot work, and the database may well be up for the other "
                 "nodes (on_db_unreachable is only for a database that cannot be reached)")
        return LEDGER_UNREACHABLE
    log(ERR, f"the cluster ledger failed ({error}); not running {what}: the database was "
             "reached, so another node may run it (on_db_unreachable is only for a "
             "database that cannot be reached)")
    return LEDGER_UNREACHABLE


def unreachable(start, error, run_again) -> int:
    """No connection to the cluster ledger could be made: [cluster] on_db_unreachable decides
    (run: the start from its first gate on the local ledger)."""
    env = start.env
    what = start.slot.unreachable_what if start.slot else start.what
    if env.get(environment.ORDERS):
        log(ERR, f"cannot reach the cluster ledger ({error}); not running {what}: an order job "
                 "is never run outside the cluster ledger, whatever on_db_unreachable says "
                 "(another node may run it, and a halt made since could not be seen)")
        return LEDGER_UNREACHABLE
    if env.get(environment.ON_DB_UNREACHABLE, "skip") != "run":
        log(ERR, f"cannot reach the cluster ledger ({error}); not running {what}: "
                 "on_db_unreachable = skip (another node may run it)")
        return LEDGER_UNREACHABLE
    log(WARNING, f"cannot reach the cluster ledger ({error}); running {what} anyway "
                 "(on_db_unreachable = run): another node may run it too")
    if start.slot:  # the slot's job and records are told the ledger is the local one
        env = dict(env, MARKET_LEDGER="local")
    return run_again(start.afresh(env, local_ledger(env)))


def _past_deadline(start, error) -> int:
    """The ledger was reached but its steps did not complete before the start's deadline:
    refused as a stale start (a critical "did not run"), with the database's reason."""
    book, key, scheduled, grace = start.book, start.key, start.planned, start.grace
    deadline = book.deadline
    at = f" at {utc_text(datetime.fromtimestamp(deadline, UTC))}" if deadline else ""
    if deadline == scheduled.timestamp() + grace:
        at += f" (instant {utc_text(scheduled)} + grace {grace} s)"
    claim = ""
    if book.claim_sent:  # the server may have written it
        claim = ("; its claim, which may have been written, was withdrawn"
                 if book.withdraw(key, start.env.get("INVOCATION_ID")) else
                 "; its claim may have been written and could not be withdrawn: if `market-timers"
                 " run` says it already ran, it did not: use --force")
    log(ERR, f"stale start: the cluster ledger could not start {start.what} before its deadline"
             f"{at}: {error}; not running it (a busy database is not an unreachable one: another "
             f"node may have it, so it is not run locally){claim}")
    late = round((datetime.now(UTC) - scheduled).total_seconds(), 3)
    note_refusal(book, key, start.base, "stale-start", late_sec=late, reason=error.reason)
    if start.slot:
        start.slot.note(refused="stale-start", late_sec=late)
    return STALE_START


def _clock_skew(start, error) -> int:
    """The cluster ledger refused the claim: this node's clock is more than max_clock_skew_ms
    off the ledger's, so its timers fired at the wrong real time and its grace check cannot be
    trusted. No claim was taken: a node whose clock agrees claims the session (at its standby
    delay). CLOCK_SKEW (179), a critical alert."""
    start.book.close()  # the lock group's connection: released for the node that will run it
    log(ERR, f"clock skew: {error}; not running {start.what}: no claim was taken, so a node whose "
             "clock agrees with the ledger's runs it. Fix this node's time sync (chrony or "
             "systemd-timesyncd: `timedatectl timesync-status`, `chronyc tracking`)")
    note_refusal(start.book, start.key, start.base, "clock-skew", clock_skew_ms=error.skew_ms,
                 max_clock_skew_ms=error.bound_ms)
    if start.slot:
        start.slot.note(refused="clock-skew", clock_skew_ms=error.skew_ms)
    return CLOCK_SKEW


def refuse_late_claim(start) -> int:
    """The gate `claim_within_grace` (runner/gates.py): a claim that completed past instant +
    grace is not run, and taken back so that the session stays runnable once (`market-timers
    run`)."""
    book, key = start.book, start.key
    os.close(start.lock)
    late = (datetime.now(UTC) - start.scheduled).total_seconds()
    withdrawn = book.withdraw(key, start.base.get("invocation"), start.claim.fence)
    book.close()  # the lock group's connection: released
    log(ERR, f"stale start: the claim of {start.what} completed {late:.1f} s after its instant, "
             f"past its grace of {start.grace} s (the cluster ledger was slow); not running it; "
             + ("the claim was withdrawn" if withdrawn else
                "its claim could not be withdrawn: `market-timers run --force` runs it"))
    note_refusal(book, key, start.base, "stale-start", late_sec=round(late, 3),
                 reason="claim completed past the grace")
    if start.slot:
        start.slot.note(refused="stale-start", late_sec=round(late, 3))
    return STALE_START
