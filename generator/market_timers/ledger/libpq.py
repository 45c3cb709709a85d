"""The few libpq calls the cluster ledger needs, through ctypes.

Why not psycopg: the runner talks to PostgreSQL before every job, on the hot path. `import psycopg`
costs 100-300 ms on these machines (its type system, asyncio, the binary extension), more than ten
times the whole runner's start; `import ctypes` plus loading Debian's libpq5 costs a few ms. The
ledger needs text-mode parameterised queries and the connection's socket (whose inheritance keeps
the lock group's advisory lock as long as the job lives), nothing else, so it binds the seven libpq
functions it calls. libpq itself does everything hard: multi-host DSNs and
target_session_attrs=read-write, TLS, authentication, connect_timeout. (bench/ measures it.)
"""

from __future__ import annotations

import ctypes
import os

from market_timers.ledger import DatabaseError, Unreachable

CONNECTION_OK = 0
PGRES_COMMAND_OK = 1
PGRES_TUPLES_OK = 2
PG_DIAG_SQLSTATE = ord("C")
UNIQUE_VIOLATION = "23505"

_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    name = _DEBIAN
    if not os.path.exists(name):  # not Debian's amd64 path: ask ctypes (imports subprocess, re)
        from ctypes.util import find_library

        name = find_library("pq")
    if not name:
        raise Unreachable("libpq is not installed (Debian package libpq5)")
    lib = ctypes.CDLL(name)
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for fn, restype, argtypes in (
        ("PQconnectdb", vp, [cp]),
        ("PQstatus", i, [vp]),
        ("PQerrorMessage", cp, [vp]),
        ("PQfinish", None, [vp]),
        ("PQsocket", i, [vp]),
        ("PQexecParams", vp, [vp, cp, i, vp, ctypes.POINTER(cp), vp, vp, i]),
        ("PQresultStatus", i, [vp]),
        ("PQresultErrorMessage", cp, [vp]),
        ("PQresultErrorField", cp, [vp, i]),
        ("PQntuples", i, [vp]),
        ("PQnfields", i, [vp]),
        ("PQgetvalue", cp, [vp, i, i]),
        ("PQgetisnull", i, [vp, i, i]),
        ("PQclear", None, [vp]),
    ):
        f = getattr(lib, fn)
        f.restype, f.argtypes = restype, argtypes
    _lib = lib
    return lib


_DEBIAN = "/usr/lib/x86_64-linux-gnu/libpq.so.5"


class Connection:
    """One libpq connection. Queries are text in, text (or None for NULL) out."""

    def __init__(self, dsn: str):
        lib = _load()
        self._lib = lib
        self._conn = lib.PQconnectdb(dsn.encode())
        if not self._conn or lib.PQstatus(self._conn) != CONNECTION_OK:
            message = (lib.PQerrorMessage(self._conn) or b"").decode(errors="replace").strip()
            if self._conn:
                lib.PQfinish(self._conn)
            self._conn = None
            raise Unreachable(_redact(message, dsn) or "cannot connect")

    def execute(self, sql: str, *params) -> list[tuple]:
        if self._conn is None:
            raise DatabaseError("the connection is closed")
        values = (ctypes.c_char_p * max(len(params), 1))(
            *[None if p is None else str(p).encode() for p in params])
        res = self._lib.PQexecParams(self._conn, sql.encode(), len(params), None, values, None,
                                     None, 0)
        if not res:
            raise Unreachable(self._error())
        try:
            status = self._lib.PQresultStatus(res)
            if status not in (PGRES_COMMAND_OK, PGRES_TUPLES_OK):
                state = self._lib.PQresultErrorField(res, PG_DIAG_SQLSTATE)
                message = (self._lib.PQresultErrorMessage(res) or b"").decode(errors="replace")
                if not state and self._lib.PQstatus(self._conn) != CONNECTION_OK:
                    raise Unreachable(message.strip() or self._error())
                raise DatabaseError(message.strip(), state.decode() if state else None)
            rows = []
            for r in range(self._lib.PQntuples(res)):
                rows.append(tuple(
                    None if self._lib.PQgetisnull(res, r, c)
                    else self._lib.PQgetvalue(res, r, c).decode()
                    for c in range(self._lib.PQnfields(res))))
            return rows
        finally:
            self._lib.PQclear(res)

    def socket(self) -> int:
        return self._lib.PQsocket(self._conn) if self._conn else -1

    def _error(self) -> str:
        return (self._lib.PQerrorMessage(self._conn) or b"").decode(errors="replace").strip()

    def close(self) -> None:
        if self._conn is not None:
            self._lib.PQfinish(self._conn)
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _redact(message: str, dsn: str) -> str:
    """libpq's messages name hosts and ports, never the password; drop a DSN echoed verbatim."""
    return message.replace(dsn, "<dsn>") if dsn else message
