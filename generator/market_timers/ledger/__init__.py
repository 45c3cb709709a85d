"""The run ledger: the one record that a (job, session) has started, and how each attempt ended.

Every start of a job goes through the ledger before the job is exec'd (runner.py):

    book = open_ledger(env)                  # the backend named by $MARKET_LEDGER (default local)
    holder = book.holder(key)                # attempt 1 of this key, or None (a cheap peek)
    claim = book.claim(key, how, fields)     # atomic: exactly one start wins attempt 1
    claim.ok / claim.attempt / claim.holder / claim.fence

A key is (job, session[, slot]). `slot` is empty for today's jobs: one run per session; a job that
runs several times a session (a periodic job) gets one key per slot. An attempt is one run
of a key: attempt 1 is the run the timer (or the operator's `market-timers run`) started; a later
attempt is only ever taken deliberately, by `how`:

    "timer"     a timer fired the unit: attempt 1 or nothing (already ran);
    "operator"  `market-timers run JOB --session DATE`: attempt 1 or nothing, no grace check;
    "forced"    `... --force`: the next free attempt number, always (a deliberate re-run);
    "retry"     systemd's Restart= after a failure (issue 13): the next attempt, only when the
                latest attempt has finished and did not succeed.

So the ledger counts attempts, not sessions: a retry or a forced re-run is recorded as attempt N+1
of the same key, never refused as "already ran" and never confused with a second timer start.

Backends implement `Ledger`. `local` (ledger/local.py) keeps files under the state directory;
a cluster backend (PostgreSQL, issue 10 section 2) implements the same calls with one row per
(job, session, slot, attempt) under a unique key on (job, session, slot) for attempt 1, returns a
fencing token in `Claim.fence` (the runner hands it to the job as MARKET_FENCE), and is selected
with MARKET_LEDGER=postgresql in the units' environment (`open_ledger`) and from the config for the
readers (`for_config`). Cluster-wide lock groups belong beside `claim` (the runner's step 4 takes the
local flock today); a cluster backend's `holder`/`attempts` answer for every node: sync, status
and the deadman read it through runrecord.py (`cluster_book`, then the local ledger for a run that
fell back to it) and handle its DatabaseError (an unreachable ledger is never "nothing ran").

Hot path: this module, its record format (fields.py), paths (paths.py), errors (errors.py) and
local.py (localfiles.py) import nothing but `os` (no json, no dataclasses, no typing):
the runner imports them before every job.
"""

import os

from market_timers.contracts import environment
from market_timers.ledger.errors import (
    ClockSkewed,
    ConnectionLost,
    DatabaseError,
    DeadlinePassed,
    LoginRefused,
    TimedOut,
    Unreachable,
)
from market_timers.ledger.fields import NUMBERS, describe, format_fields, parse_fields
from market_timers.ledger.paths import (
    LEDGER_DIR,
    RUNS_DIR,
    SYNC_DIR,
    TICKETS_DIR,
    job_ledger_dir,
    legacy_record_path,
    retry_marker_path,
    runs_dir,
    slot_records_dir,
    sync_dir,
    ticket_source,
)

__all__ = [
    "NUMBERS", "LEDGER_DIR", "RUNS_DIR", "SYNC_DIR", "TICKETS_DIR", "Claim", "ClockSkewed",
    "ConnectionLost", "DatabaseError", "DeadlinePassed", "Key", "Ledger", "LoginRefused",
    "TimedOut", "Unreachable", "describe", "for_config", "format_fields", "job_ledger_dir",
    "legacy_record_path", "open_ledger", "parse_fields", "retry_marker_path", "runs_dir",
    "slot_records_dir", "sync_dir", "ticket_source",
]


DEFAULT_STATE_DIR = environment.DEFAULT_STATE_DIR


class Key:
    """(job, session[, slot]): what runs exactly once."""

    __slots__ = ("job", "session", "slot")

    def __init__(self, job: str, session: str, slot: str = ""):
        for what, value in (("job", job), ("session", session), ("slot", slot)):
            if (value or what == "slot") and "/" not in value and not value.startswith(".") \
                    and "\n" not in value:
                continue
            raise ValueError(f"bad ledger {what}: {value!r}")
        self.job, self.session, self.slot = job, session, slot

    @property
    def name(self) -> str:
        """The session, or session+slot: one file name."""
        return f"{self.session}+{self.slot}" if self.slot else self.session

    def __repr__(self) -> str:
        return f"Key({self.job!r}, {self.session!r}, {self.slot!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Key) and (self.job, self.session, self.slot) == (
            other.job, other.session, other.slot)

    def __hash__(self) -> int:
        return hash((self.job, self.session, self.slot))


class Claim:
    """What `Ledger.claim` answers: ok (this start runs, as `attempt`) or the holder's record."""

    __slots__ = ("ok", "attempt", "holder", "fence")

    def __init__(self, ok: bool, attempt: int = 0, holder: dict | None = None,
                 fence: str | None = None):
        self.ok, self.attempt, self.holder, self.fence = ok, attempt, holder, fence


class Ledger:
    """The backend interface. Records are flat dicts of str (see `fields`).

    What only some backends can do is declared below as a flag and its calls: a backend that
    can sets the flag and implements the calls (the cluster ledger, postgresql.py, all of them);
    a caller asks the flag, never hasattr."""

    state_dir: str | None = None  # where the backend's files are (the local one's), for a message
    # Bounded steps: every database step ends by `deadline` (time.time(); None: no bound), which
    # each start sets; `claim_sent`: a claim was sent whose answer may have been lost.
    bounded = False
    deadline: float | None = None
    claim_sent = False
    # Withdrawal: `withdraw` takes back a claim that will not run (it completed too late).
    withdraws = False
    # Ledger-wide lock groups: `lock_group`, `lock_holder`, `check_fence` (a node's flock is
    # only its own).
    locks_groups = False
    # Ledger-wide pauses: `set_pause` (a failure pause that holds every node).
    pauses_everywhere = False

    def close(self) -> None:
        """Release what the backend holds open (a connection); files hold nothing."""

    def holder(self, key: Key) -> dict | None:
        """Attempt 1 of the key (who started it, when, where), or None: never started."""
        raise NotImplementedError

    def claim(self, key: Key, how: str, fields: dict) -> Claim:
        """Take the key's next attempt as `how` allows, durably, before the job is exec'd."""
        raise NotImplementedError

    def refuse(self, key: Key, fields: dict) -> None:
        """Note a start that did not run (fields["refused"]: stale-start, overlap-skipped,
        already-ran): not an attempt, but the deadman must not call the session missed."""
        raise NotImplementedError

    def finish(self, key: Key, invocation: str | None, fields: dict) -> None:
        """How the attempt (or refused start) of this systemd invocation ended (ExecStopPost=)."""
        raise NotImplementedError

    def take_ticket(self, nonce: str, key: Key) -> dict | None:
        """Consume the one-off ticket `market-timers run` wrote for this start (None: unknown,
        used, or for another key)."""
        raise NotImplementedError

    def attempts(self, key: Key) -> list[dict]:
        """Every attempt of the key, oldest first, each with its result fields when finished."""
        raise NotImplementedError

    def refusals(self, key: Key) -> list[dict]:
        raise NotImplementedError

    def keys(self, job: str | None = None) -> list[Key]:
        raise NotImplementedError

    def withdraw(self, key: Key, invocation: str | None, fence: str | None = None) -> bool:
        """(withdraws) Take back this start's claim; True when none of it is left."""
        raise NotImplementedError

    def lock_group(self, group: str, key: Key) -> tuple[int, str] | None:
        """(locks_groups) Hold the group ledger-wide: (the connection's socket, the fence
        token), or None when another node holds it."""
        raise NotImplementedError

    def lock_holder(self, group: str) -> dict | None:
        """(locks_groups) Who holds the group: node, job, session, since, fence."""
        raise NotImplementedError

    def check_fence(self, group: str, token: str) -> bool:
        """(locks_groups) Whether the fence token still holds the group."""
        raise NotImplementedError

    def set_pause(self, scope: str, name: str, fields: dict) -> None:
        """(pauses_everywhere) Write a pause every node obeys."""
        raise NotImplementedError


def open_ledger(env, hand_off: bool = False) -> Ledger:
    """The runner's backend, from the unit's environment. `hand_off`: a start's, which leaves
    the cluster DSN for its own record step (postgresql.hand_off_dsn)."""
    kind = env.get(environment.LEDGER) or "local"
    if kind == "local":
        from market_timers.ledger.local import LocalLedger

        return LocalLedger(env.get(environment.STATE_DIR) or DEFAULT_STATE_DIR)
    if kind == "postgresql":  # libpq through ctypes: a few ms, see ledger/libpq.py
        from market_timers.ledger.postgresql import PostgresLedger, hand_off_dsn, read_dsn

        dsn = read_dsn(env)
        if hand_off:
            hand_off_dsn(env, dsn)
        book = PostgresLedger(dsn, env.get(environment.NODE) or os.uname().nodename)
        bound = env.get(environment.MAX_CLOCK_SKEW_MS)
        if bound:
            if not bound.isdigit():
                raise ValueError(f"{environment.MAX_CLOCK_SKEW_MS}={bound!r} is not a whole "
                                 "number of milliseconds")
            book.max_clock_skew_ms = int(bound)
        return book
    raise ValueError(f"MARKET_LEDGER={kind!r}: unknown ledger backend (known: local, postgresql)")


def for_config(config) -> Ledger:
    """The readers' backend (sync, status, deadman, `run`), from the config."""
    if getattr(config, "cluster", None) is not None:
        from market_timers.ledger.postgresql import PostgresLedger, read_dsn

        return PostgresLedger(read_dsn(os.environ), config.cluster.node)
    from market_timers.ledger.local import LocalLedger

    return LocalLedger(os.fspath(config.state_dir))
