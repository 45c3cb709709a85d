"""The cluster ledger: the run ledger in PostgreSQL, shared by every node of a cluster.

Exactly once across nodes is PostgreSQL's unique key: attempt 1 of a (job, session, slot) is one
row, inserted with ON CONFLICT DO NOTHING, so of any number of nodes racing for a key exactly one
insert returns a row (the others read the holder and exit 173). No home-made protocol: the database
serialises, the same way Airflow's HA schedulers coordinate through row locks.

Lock groups are cluster-wide with a session-level advisory lock on the runner's connection. The
runner execs the job with that connection's socket inherited (as it does with the flock fd), so
the lock lives exactly as long as the job's process: when the job ends or is killed, the kernel
closes the socket and PostgreSQL releases the lock at once. When the whole node dies without
closing it (power cut, network gone), the server notices through TCP keepalives set on the session
(idle 5 s, 3 probes 5 s apart) and tcp_user_timeout (10 s): the lock is released within
HOLDER_DEATH_BOUND_SEC = 20 s.

Fencing: every acquisition of a lock group takes the next number of the sequence mt_fence and
writes it, with the holder's backend pid, into mt_locks. The job receives it as MARKET_FENCE;
`market-timers fence check` (check_fence) answers true only while that row still names this token
and that backend still holds the group's advisory lock (pg_locks). A node that lost its lock (its connection was
cut, another node took the group) is refused: its token is superseded, forever, since tokens only
grow.

Clocks (issue 23, "a clock step on one node"). The ledger's clock is the cluster's reference: a
node's timers fire by its own clock, and its runner judges the grace by it, so a node 30 s behind
would run an order job 30 s late and one ahead would run it early. The claim carries the node's
clock reading (time.time() as the statement is sent) and the bound ([cluster] max_clock_skew_ms,
MARKET_MAX_CLOCK_SKEW_MS, default 1000); mt_claim compares the reading with the server's
clock_timestamp() in the same statement and, more than the bound apart, refuses it (no row
written, so the session stays runnable: the node whose clock is right claims it at its standby
delay) and answers the measured skew (the ledger's clock minus the node's; positive: the node is
behind), which it also keeps in mt_nodes for `market-timers cluster status`. The runner then
refuses the start (ClockSkewed, exit 179, a critical alert). One round trip, as before.
The reading is measured on arrival, so the statement's one-way time counts in it: a claim held
up on its way (a stalled link) looks "behind". When the answer's round trip explains the skew
(the ledger's clock lies between the reading and the answer's arrival, within the bound), the
clock is not to blame: the claim is sent again with a new reading (CLAIM_RESENDS times, until the
deadline). A node ahead cannot be explained so (the way only adds time): refused at once.

The connection and its faults: pgconnection.py; the DSN: pgdsn.py; the schema, its migrations
and the node roles' rights: pgschema.py; the functions every call goes through: pgfunctions.py;
pauses and halts: pgcontrols.py.
"""

from __future__ import annotations

import time

from market_timers.ledger import (
    Claim,
    ClockSkewed,
    DatabaseError,
    DeadlinePassed,
    Key,
    Ledger,
    Unreachable,
    format_fields,
    parse_fields,
)
from market_timers.ledger.libpq import UNIQUE_VIOLATION
from market_timers.ledger.pgconnection import AFTER_DEADLINE_SEC, RETRY_PAUSE_SEC, connect
from market_timers.ledger.pgcontrols import ClusterControls
from market_timers.ledger.pgdsn import (
    HAND_OFF_DIR,
    OPERATOR_CREDENTIAL,
    drop_hand_off,
    hand_off_dsn,
    read_dsn,
    read_operator_dsn,
)
from market_timers.ledger.pgfunctions import HALT_CHANNEL, LOCK_NAMESPACE
from market_timers.ledger.pgschema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLES,
    init_schema,
    schema_version,
)

HOLDER_DEATH_BOUND_SEC = 20
# A claim refused for a skew that its own round trip explains (see the module doc) is sent again
# with a new reading, at most this many times (and never past the start's deadline).
CLAIM_RESENDS = 5


class PostgresLedger(ClusterControls, Ledger):
    """The run ledger's calls on the cluster ledger (the connection: pgconnection.py)."""

    bounded = withdraws = locks_groups = pauses_everywhere = True  # ledger.Ledger's capabilities

    def __init__(self, dsn: str, node: str):
        super().__init__(dsn, node)
        self.max_clock_skew_ms = 1000  # the runner sets [cluster] max_clock_skew_ms
        self.clock = time.time  # the reading a claim carries (see the module doc)
        self.clock_skew_ms: int | None = None  # as the last claim measured it

    # -- the runner's calls ------------------------------------------------------------------

    def holder(self, key: Key) -> dict | None:
        rows = self._execute("SELECT * FROM mt_holder($1, $2, $3)", key.job, key.session,
                             key.slot, deadline=self._past_deadline())
        return _record(rows[0]) if rows else None

    def claim(self, key: Key, how: str, fields: dict) -> Claim:
        fields = dict(fields, host=self.node, node=self.node)  # the node is the cluster's name
        if how in ("timer", "operator"):
            attempts = [1]
        else:
            rows = self._execute("SELECT * FROM mt_last_attempt($1, $2, $3)", key.job,
                                 key.session, key.slot)
            last = int(rows[0][0]) if rows else 0
            if how == "retry" and (not rows or rows[0][1] in (None, "success")):
                return Claim(False, holder=self.holder(key))
            attempts = range(last + 1, last + 100)
        for attempt in attempts:
            text = format_fields({"job": key.job, "session": key.session,
                                  "slot": key.slot or None, "attempt": attempt, "how": how,
                                  **fields})
            # One round trip: the claim, the clock check, and this node's "last seen".
            self.committed = self.claim_sent = True  # its outcome is known from its answer only
            fence = self._claim_checked(key, attempt, how, fields.get("invocation"), text)
            if fence is not None:
                return Claim(True, attempt, fence=fence)
            if how in ("timer", "operator"):
                holder = self.holder(key) or {}
                if fields.get("invocation") and holder.get("invocation") == \
                        fields["invocation"] and holder.get("node") == self.node:
                    # this very start's claim, written by a statement whose answer was lost
                    return Claim(True, 1, fence=holder.get("fence"))
                return Claim(False, holder=holder)
        raise DatabaseError(f"no free attempt number for {key!r}")

    def _claim_checked(self, key: Key, attempt: int, how: str, invocation, text: str):
        """mt_claim with this node's clock reading: the fence, or None (another holds the key);
        ClockSkewed when the ledger refused the reading and its round trip does not explain
        the skew (see the module doc)."""
        bound = self.max_clock_skew_ms
        sent: list[float] = []

        def reading() -> str:  # taken as the statement is sent, each time it is sent
            sent.append(self.clock())
            return repr(sent[-1])

        for _ in range(CLAIM_RESENDS + 1):
            rows = self._execute(
                "SELECT * FROM mt_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", key.job,
                key.session, key.slot, attempt, how, self.node, invocation, text,
                f"ran {key.job} {key.name}", reading, bound)
            received = time.time()
            fence, skew, refused = rows[0]
            self.clock_skew_ms = int(skew)
            if refused != "t":
                return fence
            ledger_at = sent[-1] + self.clock_skew_ms / 1000
            if self.clock_skew_ms < 0 or ledger_at > received + bound / 1000:
                raise ClockSkewed(self.clock_skew_ms, bound)
            # the statement was held up on its way: the clock may be right; once more
            if self.deadline is not None and time.time() + RETRY_PAUSE_SEC >= self.deadline:
                break
        why = (f"each claim took more than max_clock_skew_ms = {bound} to reach the ledger (last "
               f"{self.clock_skew_ms} ms), so this node's clock could not be checked")
        raise DeadlinePassed(f"the cluster ledger could not check this node's clock: {why}", why)

    def refuse(self, key: Key, fields: dict) -> None:
        """The refusal's note (the deadman reads it), given AFTER_DEADLINE_SEC past the
        start's deadline."""
        self._execute(
            "SELECT mt_refuse($1, $2, $3, $4, $5, $6)", key.job, key.session, key.slot, self.node,
            fields.get("invocation"),
            format_fields({"job": key.job, "session": key.session, "slot": key.slot or None,
                           "node": self.node, **fields}), deadline=self._past_deadline())

    def withdraw(self, key: Key, invocation: str | None, fence: str | None = None) -> bool:
        """Take back this start's claim, which will not run (it completed past the deadline, or
        its answer never came), so that the session stays runnable once: on a new connection,
        given AFTER_DEADLINE_SEC from now. True when no claim of this start is left."""
        if invocation is None and fence is None:
            return False
        self.close()
        self.committed = False
        budget = time.time() + AFTER_DEADLINE_SEC
        try:
            # first end the backend of the claim (its statement could still commit otherwise):
            # found by this process's random application_name, so never another node's
            self._execute("SELECT pg_terminate_backend(pid, 2000) FROM pg_stat_activity "
                          "WHERE application_name = ANY($1::text[]) AND pid <> pg_backend_pid()",
                          "{" + ",".join(f'"{t}"' for t in self._tags) + "}", deadline=budget)
            self._execute(
                "SELECT mt_withdraw($1, $2, $3, $4, $5, $6)", key.job, key.session, key.slot, self.node,
                invocation, fence, deadline=budget)
        except DatabaseError:
            return False
        return True

    def finish(self, key: Key, invocation: str | None, fields: dict) -> None:
        text = format_fields(fields)
        rows = self._execute(
            "SELECT mt_finish($1, $2, $3, $4, $5, $6)",
            key.job, key.session, key.slot, invocation, fields.get("result"), text)
        if rows[0][0] is None:  # the runner stopped before it wrote anything
            status = str(fields.get("exit_status") or "")
            self.refuse(key, dict(fields, invocation=invocation,
                                  refused="runner-error" if status == "175" or status == "172"
                                  else "unrecorded"))

    def take_ticket(self, nonce: str, key: Key) -> dict | None:
        rows = self._execute("SELECT mt_take_ticket($1, $2, $3)", nonce, key.job, key.session)
        return parse_fields(rows[0][0]) if rows[0][0] is not None else None

    def write_ticket(self, nonce: str, fields: dict, owner=None) -> None:
        self._execute("SELECT mt_write_ticket($1, $2, $3, $4)", nonce, fields.get("job"), fields.get("session"),
                          format_fields(fields))

    # -- cluster-wide lock groups and fencing --------------------------------------------------

    def lock_group(self, group: str, key: Key) -> tuple[int, str] | None:
        """Take the group's advisory lock: (socket fd to inherit, fence token), or None (busy)."""
        # One statement, the lock and its fence row: when its connection breaks, the lock (if
        # taken) dies with it, so it may be retried on a new one.
        rows = self._execute("SELECT mt_lock($1, $2, $3, $4)", group, self.node, key.job,
                             key.name)
        if rows[0][0] is None:
            return None
        self.committed = True  # the lock lives on this connection: it must not be replaced
        return self.conn.socket(), rows[0][0]

    def lock_holder(self, group: str) -> dict | None:
        rows = self._execute("SELECT * FROM mt_lock_holder($1)", group)
        if not rows:
            return None
        node, job, session, since, fence = rows[0]
        return {"node": node, "job": job, "session": session, "since": since, "fence": fence}

    def check_fence(self, group: str, token: str) -> bool:
        """True while `token` is the group's current fence and its holder's session lives."""
        rows = self._execute("SELECT mt_check_fence($1, $2)", group, token)
        return rows[0][0] == "t"

    # -- readers -----------------------------------------------------------------------------

    def attempts(self, key: Key) -> list[dict]:
        rows = self._read("SELECT * FROM mt_attempts($1, $2, $3)", key.job,
                                 key.session, key.slot)
        return [_record(r) for r in rows]

    def refusals(self, key: Key) -> list[dict]:
        rows = self._read("SELECT fields, node, NULL FROM mt_refusals_of($1, $2, $3)",
                                 key.job, key.session, key.slot)
        return [_record(r) for r in rows]

    def keys(self, job: str | None = None) -> list[Key]:
        rows = self._read("SELECT * FROM mt_keys($1)", job)
        return [Key(*r) for r in rows]

    def note_miss(self, key: Key) -> bool:
        """True for the one node that reports this miss first (cluster-wide dedup)."""
        rows = self._read("SELECT mt_note_miss($1, $2, $3, $4)", key.job, key.session,
                                 key.slot, self.node)
        return rows[0][0] == "t"

    def nodes(self) -> list[dict]:
        """Each node: last seen, what it did, and its clock skew as its last claim measured it
        (the ledger's clock minus the node's, ms; None before its first claim)."""
        rows = self._read("SELECT * FROM mt_node_list()")
        clocks = {n: (None if skew is None else int(skew), at)
                  for n, skew, at in self._read("SELECT * FROM mt_node_clocks()")}
        return [{"node": n, "last_seen": s, "what": w,
                 "clock_skew_ms": clocks.get(n, (None, None))[0],
                 "clock_checked_at": clocks.get(n, (None, None))[1]} for n, s, w in rows]

    def runs(self, limit: int = 200) -> list[dict]:
        rows = self._read("SELECT * FROM mt_recent_runs($1)", limit)
        names = ("job", "session", "slot", "attempt", "how", "node", "claimed_at", "finished_at",
                 "result")
        return [dict(zip(names, r, strict=True)) for r in rows]


def _record(row: tuple) -> dict:
    fields, node, fence = row
    record = parse_fields(fields)
    record.setdefault("node", node)
    if fence is not None:
        record.setdefault("fence", fence)
    return record



# Names callers take from here (cli/cluster.py, controls/haltwatch.py, the ledger's opener, tests).
__all__ = ["HALT_CHANNEL", "HAND_OFF_DIR", "OPERATOR_CREDENTIAL", "HOLDER_DEATH_BOUND_SEC", "LOCK_NAMESPACE",
           "MIGRATIONS", "SCHEMA_VERSION", "TABLES", "UNIQUE_VIOLATION", "DatabaseError",
           "PostgresLedger", "Unreachable", "connect", "drop_hand_off", "hand_off_dsn",
           "init_schema", "read_dsn", "read_operator_dsn", "schema_version"]
