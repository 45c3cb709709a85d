"""One connection to the cluster ledger and its statements under a start's deadline.

Faults (issue 23). Only a connection that cannot be made is "unreachable" ([cluster]
on_db_unreachable decides). Once connected, a busy database (RETRYABLE: lock timeout, statement
timeout, serialisation failure, deadlock) is retried until the start's deadline (`deadline`, set
by the runner to instant + grace), and a broken connection is reconnected while nothing depends
on it (no lock group taken, no claim sent); past the deadline the step raises DeadlinePassed and
the runner refuses the start as stale. Every step is bounded on the client too: connect_timeout
(at most what is left of the deadline), client keepalives and tcp_user_timeout in the conninfo
(CLIENT_SETTINGS), and each query waits for its answer until the deadline only (libpq.py).

Connections are kept alive from both ends (SESSION_SETTINGS on the server, CLIENT_SETTINGS in
the conninfo), so that a dead node's lock group is released within HOLDER_DEATH_BOUND_SEC
(postgresql.py) and a dead server is noticed as fast.
"""

from __future__ import annotations

import os
import time

from market_timers.ledger import (
    ConnectionLost,
    DatabaseError,
    DeadlinePassed,
    TimedOut,
    Unreachable,
)
from market_timers.ledger.conninfo import has_param, with_defaults, with_param
from market_timers.ledger.libpq import Connection
from market_timers.ledger.pgschema import SCHEMA_VERSION

# Per-session server settings: how fast PostgreSQL notices a dead node (see module doc), and
# bounds on every statement. Sent in the start-up packet (libpq's `options`): no round trip.
SESSION_SETTINGS = (
    ("tcp_keepalives_idle", "5"), ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"), ("tcp_user_timeout", "10000"),
    ("statement_timeout", "10000"), ("lock_timeout", "5000"),
    # a statement of a client that gave up (its deadline passed, the connection closed) ends
    # within a second, rather than holding its locks until it completes
    ("client_connection_check_interval", "1000"),
)
CONNECT_TIMEOUT_SEC = 3
# The client's side of the same (conninfo; the DSN's own value wins): libpq notices a dead server
# as the server notices a dead node, while the job holds the lock group's connection.
CLIENT_SETTINGS = (
    ("keepalives", "1"), ("keepalives_idle", "5"), ("keepalives_interval", "5"),
    ("keepalives_count", "3"), ("tcp_user_timeout", "10000"),
    ("gssencmode", "disable"),  # with "prefer", libpq probes for Kerberos credentials: ~3 ms
)
# SQLSTATEs of a live, busy database: retried until the start's deadline, never "unreachable".
RETRYABLE = {"55P03": "lock timeout", "57014": "statement timeout or cancelled",
             "40001": "serialization failure", "40P01": "deadlock",
             "53300": "no connection slot free", "57P03": "the server is starting up"}
RETRY_PAUSE_SEC = 0.2
# A step that decides nothing (the peek at the holder, a refusal's note, taking back a claim) may
# take this long past the start's deadline: the peek still says "already ran" for a late start.
AFTER_DEADLINE_SEC = 3


def connect(dsn: str, deadline: float | None = None) -> Connection:
    """A connection with the session settings above (Unreachable when no host answers); with a
    deadline (time.time()), connect_timeout is at most what is left of it (libpq's minimum: 2 s
    a host)."""
    if not has_param(dsn, "connect_timeout"):
        timeout = CONNECT_TIMEOUT_SEC
        if deadline is not None:
            timeout = max(2, min(timeout, int(deadline - time.time() + 0.999)))
        dsn = with_param(dsn, "connect_timeout", str(timeout))
    dsn = with_defaults(dsn, CLIENT_SETTINGS)
    tag = None
    if not has_param(dsn, "application_name"):  # names this connection's backend (withdraw)
        tag = f"market-timers {os.getpid()} {os.urandom(6).hex()}"
        dsn = with_param(dsn, "application_name", tag)
    in_startup = not has_param(dsn, "options")  # the DSN's own `options` wins; then SET them
    if in_startup:
        dsn = with_param(dsn, "options", " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS))
    conn = Connection(dsn)
    conn.tag = tag
    if not in_startup:
        try:
            for name, value in SESSION_SETTINGS:
                conn.execute(f"SET {name} = {value}", deadline=deadline)
        except DatabaseError:
            conn.close()
            raise
    return conn



class LedgerConnection:
    """The connection a PostgresLedger makes its calls on (opened lazily; `close` when done).

    `deadline` (time.time(), None: none): the runner's start sets it to instant + grace; each
    statement then retries a busy database and reconnects a broken connection until it, and
    raises DeadlinePassed past it (see the module doc)."""

    def __init__(self, dsn: str, node: str):
        self.dsn, self.node = dsn, node
        self._conn: Connection | None = None
        self.deadline: float | None = None
        self.committed = False  # a lock group taken or a claim sent: no reconnect from here on
        self.claim_sent = False  # a claim statement was sent (its answer may have been lost)
        self._tags: list[str] = []  # application_name of each connection it opened

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._connect(self.deadline)
        return self._conn

    def _connect(self, deadline: float | None) -> None:
        self._conn = connect(self.dsn, deadline)
        if self._conn.tag:
            self._tags.append(self._conn.tag)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _execute(self, sql: str, *params, deadline: float | None = None) -> list[tuple]:
        """One statement under the start's deadline (or `deadline`), retried while the database
        is busy or the connection broke before anything depended on it."""
        deadline = deadline or self.deadline
        if deadline is None:
            return self._read(sql, *params)
        error = None
        while True:
            try:
                if self._conn is None and time.time() >= deadline:
                    raise TimedOut("the deadline passed before the statement was sent")
                if self._conn is None:
                    self._connect(deadline)
                # a callable parameter is read as the statement is sent (the claim's clock)
                return self._conn.execute(sql, *(p() if callable(p) else p for p in params),
                                          deadline=deadline)
            except Unreachable as e:
                if not self.committed:
                    raise  # no connection could be made: on_db_unreachable decides
                raise ConnectionLost(f"the connection holding this start's lock group or claim "
                                     f"broke and cannot be made again ({e})") from None
            except TimedOut as e:
                self._conn = None  # closed by libpq.py
                reason = f"{e}; before that: {error}" if error else str(e)
                raise DeadlinePassed(f"the cluster ledger did not answer in time ({reason})",
                                     reason) from None
            except ConnectionLost:
                self.close()
                if self.committed:  # the lock died with it, or the claim's outcome is unknown
                    raise
                error = "the connection broke"
            except DatabaseError as e:
                if e.sqlstate not in RETRYABLE:
                    raise _schema_hint(e) from None
                error = f"{e} (SQLSTATE {e.sqlstate}: {RETRYABLE[e.sqlstate]})"
            if time.time() + RETRY_PAUSE_SEC >= deadline:
                raise DeadlinePassed(f"the cluster ledger was busy until the deadline: {error}",
                                     error)
            time.sleep(RETRY_PAUSE_SEC)

    def _read(self, sql: str, *params) -> list[tuple]:
        """A statement of the readers (status, deadman, sync): no deadline, no retry."""
        try:
            return self.conn.execute(sql, *(p() if callable(p) else p for p in params))
        except DatabaseError as e:
            raise _schema_hint(e) from None

    def seen(self, what: str) -> None:
        self._read("SELECT mt_seen($1, $2)", self.node, what)

    def _past_deadline(self) -> float | None:
        """The bound of a step that decides nothing (AFTER_DEADLINE_SEC)."""
        return self.deadline and max(self.deadline, time.time() + AFTER_DEADLINE_SEC)


def _schema_hint(e: DatabaseError) -> DatabaseError:
    """A missing ledger function (SQLSTATE 42883) means a schema older than this code."""
    if e.sqlstate == "42883" and "mt_" in str(e):
        return DatabaseError(f"{e}: the ledger's schema is older than this market-timers "
                             f"(version {SCHEMA_VERSION}): run `market-timers cluster init` with "
                             "the owner role's DSN", e.sqlstate)
    return e
