"""The cluster ledger's errors, importable without loading libpq (the runner's hot path)."""


class DatabaseError(Exception):
    """A failed connection or statement; `sqlstate` when the server gave one."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class Unreachable(DatabaseError):
    """No connection could be made (every host of the DSN tried), or no DSN to try."""
