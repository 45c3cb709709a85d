"""The job runner: `ExecStart=market-timers-run -- COMMAND...` in every generated service.

A start is a `Start` passed through `GATES` in order; the first gate that refuses ends it with an
exit status (contracts/exitcodes.py), and a start that passes them all execs the job. Why the
gates come in this order (the promise: exactly once per session, on time, or someone is told) is
told once, in market-timers-run(1), "Order of the checks".

Hot path: standard library only, never pandas, exchange_calendars, json, typing or dataclasses;
the whole context comes from the unit's Environment= lines (render.py). The gates and their order
are gates.py's. What only some starts need is imported by the gate that needs it: ticket.py (`market-timers run`), retry.py, upstream.py
(`requires`), clusterfaults.py (the cluster ledger failing), slotclock.py (a periodic job's slot),
prefire.py (a pre-fired start). start.py holds what every start shares; the entry point,
market-timers-run, is run.py at the package's root.
"""

import os
import sys
from datetime import UTC, datetime

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import RUNNER_ERROR
from market_timers.contracts.outcomes import EXIT
from market_timers.ledger import DatabaseError
from market_timers.runner.gates import GATES
from market_timers.runner.start import (
    ERR,
    exec_job,
    fence_answerer,
    log,
    note_ending,
    note_refusal,
    scheduled_instant,
    utc_text,
)

REFUSAL_OF_STATUS = {status: name for name, status in EXIT.items()}  # 178 -> "halted"...

USAGE = """\
usage: market-timers-run -- COMMAND [ARG...]
       market-timers-run --record [UNIT]
       market-timers-run --supervise -- COMMAND [ARG...]

The job runner of market-timers: every generated job unit runs it as its ExecStart=, with the
job's context in its environment (MARKET_JOB, MARKET_SESSION, MARKET_SCHEDULED_UTC, ...). It
refuses a session that already ran (exit 173), a start later than the grace (170), a busy lock
group (171), a start whose `requires` did not succeed in the session (176), a paused job or lock
group (177), a job a halt covers (178, `market-timers halt`; every start, the operator's too),
a start on a node whose clock is more than [cluster] max_clock_skew_ms off the cluster ledger's
(179), and exits 172 when it cannot run the job; otherwise it execs COMMAND, whose exit
status passes through (128 + the signal for a job killed by SIGTERM, SIGINT, SIGHUP or SIGPIPE,
which systemd would count as a success). --record (ExecStopPost=) records how the run ended,
from the runner's own account of it: a job's own exit 170-179 is its failure, not a refusal;
given UNIT (%n), it then leaves the unit's end record for the alert handler (<state_dir>/ends).
--supervise (on_halt's unit) runs COMMAND with no check, as its child: its exit status, or 128 +
the signal for a death by SIGTERM, SIGINT, SIGHUP or SIGPIPE; 203 when it cannot be executed.
See market-timers-run(1).
"""


class Start:
    """One start of a session's job or of a periodic job's slot (`slot`: slotclock.Slot, what a
    slot adds: its records, its lock label; it takes no ticket, no retry, no standby delay and
    no pre-fire wait). The gates read it, and a gate that passes leaves on it what the later
    ones need: `how` and `by` (the ticket, a retry), `user`, `lock`, `fence`, `claim`.

    `began` and `planned` are the clock as the runner read it; `now` and `scheduled` the clock as
    the gates judge it (after a standby's wait; a restarted operator's run counts from its own
    start); `late` is now - scheduled, in seconds. `how`: timer, operator, forced or retry
    (ledger/__init__.py)."""

    __slots__ = ("argv", "env", "book", "key", "slot", "began", "planned", "grace", "base",
                 "now", "scheduled", "late", "how", "by", "user", "lock", "fence", "claim")

    def __init__(self, argv: list[str], env: dict, key, now: datetime, scheduled: datetime,
                 grace: int, slot=None, book=None):
        self.argv, self.env, self.book, self.key, self.slot = argv, env, book, key, slot
        self.began, self.planned, self.grace = now, scheduled, grace
        self.base = dict(scheduled_utc=utc_text(scheduled), host=os.uname().nodename,
                         pid=os.getpid(), invocation=env.get("INVOCATION_ID"))
        self.now, self.scheduled = now, scheduled
        self.late = (now - scheduled).total_seconds()
        self.how, self.by = "timer", None
        self.user = self.lock = self.fence = self.claim = None

    def afresh(self, env: dict, book) -> "Start":
        """This start from its first gate again, on another ledger (the local one, when the
        cluster's cannot be reached)."""
        return Start(self.argv, env, self.key, self.began, self.planned, self.grace, self.slot,
                     book)

    @property
    def what(self) -> str:
        return self.slot.what if self.slot else f"{self.key.job} for session {self.key.session}"

    @property
    def late_field(self) -> dict:
        return {"late_sec": round(self.late, 3)}

    def refused(self, why: str, status: int, **fields) -> int:
        """Note the refusal in the ledger (no claim: the deadman does not call the session
        missed), and a slot's in its record with its lateness; the exit status."""
        note_refusal(self.book, self.key, self.base, why, **fields)
        if self.slot:
            self.slot.note(refused=why, **self.late_field)
        return status


def read_start(argv: list[str], env: dict) -> Start:
    """The start the unit's environment describes (KeyError, ValueError: a bad context)."""
    job = env[environment.JOB]
    grace = int(env.get(environment.GRACE_SEC, "120"))
    now = datetime.now(UTC)
    if env.get(environment.SLOT_EVERY_SEC):  # a periodic job: judge the slot (slotclock.py)
        from market_timers.runner.slotclock import Slot

        slot = Slot(env, job, now)
        return Start(argv, env, slot.key, now, slot.instant, grace, slot)
    scheduled = scheduled_instant(env, now)
    session = env.get(environment.SESSION) or scheduled.date().isoformat()
    return Start(argv, env, ledger.Key(job, session, env.get(environment.SLOT, "")), now,
                 scheduled, grace)


def run(argv: list[str], env: dict) -> int:
    """A start, and the runner's account of a refusal (start.py note_ending) unless the job's
    own ending was noted first (a job that ran and exited 178 is not a halt): the record step and
    the alert handler read the refusal from it, never from the exit status alone."""
    status = _run(argv, env)
    kind = REFUSAL_OF_STATUS.get(status)
    if kind is not None:
        note_ending(env, f"refused {kind}")
    return status


def _run(argv: list[str], env: dict) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        log(ERR, "usage: market-timers-run -- COMMAND [ARG...]  |  market-timers-run --record")
        return RUNNER_ERROR
    try:
        start = read_start(argv, env)
    except (KeyError, ValueError) as e:
        log(ERR, f"bad or missing context in the environment ({e}); run me from a unit made "
                 "by `market-timers render`")
        return RUNNER_ERROR
    try:
        start.book = ledger.open_ledger(env, hand_off=True)  # the DSN, for the record step
    except ValueError as e:  # an unknown MARKET_LEDGER
        log(ERR, f"{e}; run me from a unit made by `market-timers render`")
        return RUNNER_ERROR
    except DatabaseError as e:  # the cluster ledger's DSN credential is missing or empty
        from market_timers.runner.clusterfaults import refuse

        return refuse(start, e, _start)
    try:
        return _start(start)
    except DatabaseError as e:  # unreachable, a skewed clock, past the deadline, or failed
        from market_timers.runner.clusterfaults import refuse

        return refuse(start, e, _start)


def _start(start: Start) -> int:
    """The one start sequence: every gate in the order of GATES, then the job."""
    for gate in GATES:
        refused = gate(start)
        if refused is not None:
            return refused
    return _exec(start)


def _exec(start: Start) -> int:
    """The job, once every gate passed: as its user, supervised, holding the lock for exactly
    as long as it runs (start.py exec_job); a pre-fired start first waits for the instant."""
    env, slot, user, fence, taken = start.env, start.slot, start.user, start.fence, start.claim
    answer = None
    if fence is not None and user is not None:  # the job asks its supervisor (start.py)
        answer = fence_answerer(start.book, env.get(environment.LOCK_GROUP, start.key.job),
                                str(fence))
    if slot:
        slot.ran(start.late, taken.attempt)
        if env.get(environment.LEAD_SEC):  # the unit's Nice=-10 without a wait: not the job's
            from market_timers.runner.nice import job_nice, set_nice

            set_nice(job_nice(env))
        return exec_job(start.argv, env, start.key.session, slot.text, taken, fence, user=user,
                        fence_answer=answer, MARKET_SLOT_UTC=slot.text)
    capable, wait = False, []
    if env.get(environment.LEAD_SEC):  # a pre-fired start: the wait for the instant
        from market_timers.runner.prefire import await_exec_time

        capable, wait = await_exec_time(env, start.scheduled, start.key.job,
                                        escort_later=user is not None)
    escort_at = start.scheduled.timestamp() if capable and user is not None else None
    return exec_job([*wait, *start.argv], env, start.key.session, utc_text(start.scheduled),
                    taken, fence, drop_capabilities=capable, user=user, escort_at=escort_at,
                    fence_answer=answer)


def main(argv: list[str] | None = None) -> int:
    """A start (`market-timers-run -- COMMAND`); the entry point, with --record, is run.py."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE, end="")
        return 0
    return run(argv, dict(os.environ))
