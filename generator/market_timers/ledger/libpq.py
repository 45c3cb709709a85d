"""The few libpq calls the cluster ledger needs, through ctypes.

Why not psycopg: the runner talks to PostgreSQL before every job, on the hot path. `import psycopg`
costs 100-300 ms on these machines (its type system, asyncio, the binary extension), more than ten
times the whole runner's start; `import ctypes` plus loading Debian's libpq5 costs a few ms. The
ledger needs text-mode parameterised queries and the connection's socket (whose inheritance keeps
the lock group's advisory lock as long as the job lives), nothing else, so it binds the few libpq
functions it calls. libpq itself does everything hard: multi-host DSNs and
target_session_attrs=read-write, TLS, authentication, connect_timeout. (bench/ measures it.)

Every query can have a client-side deadline (an epoch time): it is sent without waiting for the
answer (PQsendQueryParams; the ledger's statements are far smaller than a socket's send buffer,
so the send itself does not wait on a stalled network), and the answer is read as it arrives (PQconsumeInput, select on
PQsocket) until the deadline; at the deadline the connection is closed and TimedOut raised (libpq
15's PQcancel connects without a timeout, so it is not used; the server ends the statement when
it notices the closed connection: client_connection_check_interval, ledger/postgresql.py).

Errors: Unreachable when no connection could be made (but a server that answers and refuses
the session for now (out of connection slots, starting up) is a DatabaseError with the SQLSTATE,
and a login that cannot work (the server refused it: password, pg_hba.conf, role, certificate;
or libpq had no password to send) is LoginRefused: it was reached),
ConnectionLost when a live one broke during a statement, TimedOut at the deadline, DatabaseError with the SQLSTATE for the server's errors, and for a row that is not
UTF-8. Their text is redacted of every DSN fragment (conninfo.py).
libpq is loaded by its soname, libpq.so.5 (Debian's libpq5 on every architecture).
"""

from __future__ import annotations

import ctypes
import select
import time

from market_timers.ledger import (
    ConnectionLost,
    DatabaseError,
    LoginRefused,
    TimedOut,
    Unreachable,
)
from market_timers.ledger.conninfo import redact

CONNECTION_OK = 0
PGRES_COMMAND_OK = 1
PGRES_TUPLES_OK = 2
PG_DIAG_SQLSTATE = ord("C")
PG_DIAG_MESSAGE_PRIMARY = ord("M")
UNIQUE_VIOLATION = "23505"
SONAME = "libpq.so.5"
# A server that answers a connection but refuses the session for now: reached, so busy, not
# unreachable (libpq gives no SQLSTATE for a failed connection: the server's English message).
SERVER_BUSY = (
    ("too many clients already", "53300"), ("too many connections for", "53300"),
    ("remaining connection slots are reserved", "53300"),
    ("the database system is starting up", "57P03"),
    ("the database system is not yet accepting connections", "57P03"),
)
# A server that answers and refuses this node's login for good (a rotated password, a missing
# pg_hba.conf line, a dropped role, a certificate that does not verify): the database is up and
# the other nodes may reach it, so this is not "unreachable" either, and on_db_unreachable =
# "run" must not run the job on the local ledger beside them.
LOGIN_REFUSED = (
    ("password authentication failed", "28P01"), ("authentication failed for user", "28000"),
    ("no pg_hba.conf entry", "28000"), ("pg_hba.conf rejects connection", "28000"),
    ("does not exist", "28000"),  # FATAL: role "x" / database "x" does not exist
    ("permission denied for database", "42501"),
    ("is not permitted to log in", "28000"),
    ("certificate verify failed", "08006"), ("does not match host name", "08006"),
)
# libpq's own verdict on this node's credentials, after a server answered and asked for them
# (no FATAL from the server): a DSN without the password the server wants is a configuration
# error too, not an unreachable database (issue 44).
CLIENT_LOGIN_REFUSED = (
    ("fe_sendauth: no password supplied", "28P01"), ("password retrieved from file", "28P01"),
    ("channel binding required", "28000"), ("channel binding is required", "28000"),
    ("server requested SCRAM", "28000"), ("server did not complete authentication", "28000"),
)

_lib = None


class _Notify(ctypes.Structure):
    """libpq's PGnotify: a NOTIFY received on a connection that LISTENs."""
    _fields_ = [("relname", ctypes.c_char_p), ("be_pid", ctypes.c_int),
                ("extra", ctypes.c_char_p), ("next", ctypes.c_void_p)]


def _load():
    global _lib
    if _lib is not None:
        return _lib
    try:
        lib = ctypes.CDLL(SONAME)
    except OSError:
        raise Unreachable(f"libpq is not installed ({SONAME}, Debian package libpq5)") from None
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for fn, restype, argtypes in (
        ("PQconnectdb", vp, [cp]),
        ("PQstatus", i, [vp]),
        ("PQerrorMessage", cp, [vp]),
        ("PQfinish", None, [vp]),
        ("PQsocket", i, [vp]),
        ("PQsendQueryParams", i, [vp, cp, i, vp, ctypes.POINTER(cp), vp, vp, i]),
        ("PQconsumeInput", i, [vp]),
        ("PQisBusy", i, [vp]),
        ("PQgetResult", vp, [vp]),
        ("PQresultStatus", i, [vp]),
        ("PQresultErrorMessage", cp, [vp]),
        ("PQresultErrorField", cp, [vp, i]),
        ("PQntuples", i, [vp]),
        ("PQnfields", i, [vp]),
        ("PQgetvalue", cp, [vp, i, i]),
        ("PQgetisnull", i, [vp, i, i]),
        ("PQclear", None, [vp]),
        ("PQnotifies", ctypes.POINTER(_Notify), [vp]),
        ("PQfreemem", None, [vp]),
    ):
        f = getattr(lib, fn)
        f.restype, f.argtypes = restype, argtypes
    _lib = lib
    return lib


class Connection:
    """One libpq connection. Queries are text in, text (or None for NULL) out."""

    def __init__(self, dsn: str):
        lib = _load()
        self._lib, self._dsn = lib, dsn
        self.tag: str | None = None  # its application_name, when the ledger chose it
        self._conn = lib.PQconnectdb(dsn.encode())
        if not self._conn or lib.PQstatus(self._conn) != CONNECTION_OK:
            message = self._error()
            if self._conn:
                lib.PQfinish(self._conn)
            self._conn = None
            for marker, sqlstate in SERVER_BUSY:
                if marker in message:  # a live server that refuses a session for now
                    raise DatabaseError(message, sqlstate)
            for marker, sqlstate in LOGIN_REFUSED:  # the server's FATAL, or TLS's verdict
                if marker in message and ("FATAL:" in message or sqlstate == "08006"):
                    raise LoginRefused(f"the server refused this node's login: {message}",
                                       sqlstate)
            for marker, sqlstate in CLIENT_LOGIN_REFUSED:
                if marker in message:
                    raise LoginRefused(f"this node cannot log in to the server: {message}",
                                       sqlstate)
            raise Unreachable(message or "cannot connect")

    def execute(self, sql: str, *params, deadline: float | None = None) -> list[tuple]:
        """The rows of one statement; `deadline` (time.time()) bounds the wait for them."""
        if self._conn is None:
            raise ConnectionLost("the connection is closed")
        lib, conn = self._lib, self._conn
        values = (ctypes.c_char_p * max(len(params), 1))(
            *[None if p is None else str(p).encode() for p in params])
        if not lib.PQsendQueryParams(conn, sql.encode(), len(params), None, values, None, None,
                                     0):
            raise self._lost()
        error, rows = None, []
        while True:
            self._wait(deadline)
            res = lib.PQgetResult(conn)
            if not res:
                break
            try:
                status = lib.PQresultStatus(res)
                if status in (PGRES_COMMAND_OK, PGRES_TUPLES_OK):
                    try:
                        rows = self._rows(res)
                    except DatabaseError as e:  # every result is read all the same
                        error = error or e
                elif error is None:
                    error = self._result_error(res)
            finally:
                lib.PQclear(res)
        if error is not None:
            raise error
        return rows

    def _wait(self, deadline: float | None) -> None:
        """Until libpq has a whole result: read what arrives, until the deadline."""
        lib, conn = self._lib, self._conn
        while lib.PQisBusy(conn):
            timeout = None if deadline is None else deadline - time.time()
            if timeout is not None and timeout <= 0:
                self.close()
                raise TimedOut("no answer from the cluster ledger before the deadline")
            try:
                ready, _, _ = select.select([lib.PQsocket(conn)], [], [], timeout)
            except (OSError, ValueError) as e:
                raise self._lost(str(e)) from None
            if ready and not lib.PQconsumeInput(conn):
                raise self._lost()

    def _rows(self, res) -> list[tuple]:
        lib = self._lib
        try:
            return [tuple(None if lib.PQgetisnull(res, r, c) else lib.PQgetvalue(res, r, c).decode()
                          for c in range(lib.PQnfields(res)))
                    for r in range(lib.PQntuples(res))]
        except UnicodeDecodeError as e:
            raise DatabaseError(f"a row of the cluster ledger is not UTF-8 ({e.reason} at byte "
                                f"{e.start}): the ledger holds text only; check who wrote "
                                "it") from None

    def _result_error(self, res) -> DatabaseError:
        lib = self._lib
        state = lib.PQresultErrorField(res, PG_DIAG_SQLSTATE)
        primary = lib.PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)
        text = (primary or lib.PQresultErrorMessage(res) or b"").decode(errors="replace")
        text = redact(text.strip(), self._dsn)
        if not state and lib.PQstatus(self._conn) != CONNECTION_OK:
            return ConnectionLost(text or self._error())
        return DatabaseError(text, state.decode() if state else None)

    def _lost(self, why: str = "") -> ConnectionLost:
        error = ConnectionLost(why or self._error() or "the connection to the ledger broke")
        self.close()
        return error

    def notifications(self, timeout: float) -> list[tuple[str, str]]:
        """(channel, payload) of each NOTIFY that arrived (after LISTEN), waiting up to `timeout`
        seconds for the first; [] when none came (ConnectionLost when the connection broke)."""
        if self._conn is None:
            raise ConnectionLost("the connection is closed")
        lib, conn = self._lib, self._conn
        out = self._drain()
        if out:
            return out
        try:
            ready, _, _ = select.select([lib.PQsocket(conn)], [], [], max(0.0, timeout))
        except (OSError, ValueError) as e:
            raise self._lost(str(e)) from None
        if ready and not lib.PQconsumeInput(conn):
            raise self._lost()
        return self._drain()

    def _drain(self) -> list[tuple[str, str]]:
        lib, out = self._lib, []
        while True:
            note = lib.PQnotifies(self._conn)
            if not note:
                return out
            try:
                out.append(((note.contents.relname or b"").decode(errors="replace"),
                            (note.contents.extra or b"").decode(errors="replace")))
            finally:
                lib.PQfreemem(ctypes.cast(note, ctypes.c_void_p))

    def socket(self) -> int:
        return self._lib.PQsocket(self._conn) if self._conn else -1

    def _error(self) -> str:
        raw = self._lib.PQerrorMessage(self._conn) if self._conn else b""
        return redact((raw or b"").decode(errors="replace").strip(), self._dsn)

    def close(self) -> None:
        if self._conn is not None:
            self._lib.PQfinish(self._conn)
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
