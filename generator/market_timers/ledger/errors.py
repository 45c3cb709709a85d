"""The cluster ledger's errors, importable without loading libpq (the runner's hot path)."""


class DatabaseError(Exception):
    """A failed connection or statement; `sqlstate` when the server gave one."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class Unreachable(DatabaseError):
    """No connection could be made (every host of the DSN tried), or no DSN to try: the only
    error that [cluster] on_db_unreachable decides about."""


class LoginRefused(DatabaseError):
    """This node's login cannot work: the server refused it (password, pg_hba.conf, role,
    certificate), libpq had no password to send, or the DSN credential is missing or empty. A
    configuration error, never "unreachable": refused (175) and alerted, never run locally."""


class ConnectionLost(DatabaseError):
    """A live connection broke during a statement: whether the server did it is unknown."""


class TimedOut(DatabaseError):
    """No answer before the client-side deadline; the connection was closed."""


class DeadlinePassed(DatabaseError):
    """A start's database steps could not complete before its deadline (instant + grace): the
    database was busy (lock or statement timeout, serialisation failure, deadlock; each retried)
    or did not answer. `reason` is the last error. The start is refused as stale, never run
    locally: the connection was live, so another node may well have claimed it."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class ClockSkewed(DatabaseError):
    """The cluster ledger refused the claim: this node's clock differs from the server's by more
    than the bound (ledger/postgresql.py). `skew_ms`: the ledger's clock minus this node's at the
    claim (positive: this node is behind); `bound_ms`: the bound. No claim was taken."""

    def __init__(self, skew_ms: int, bound_ms: int):
        side = "behind" if skew_ms > 0 else "ahead of"
        super().__init__(f"this node's clock is {abs(skew_ms) / 1000:.1f} s {side} the cluster "
                         f"ledger's (more than max_clock_skew_ms = {bound_ms})")
        self.skew_ms, self.bound_ms = skew_ms, bound_ms
