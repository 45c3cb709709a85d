"""The operator controls kept in the cluster ledger, for every node: pauses (ledger/pauses.py)
and halts (ledger/halts.py), each a row read and written through the ledger's functions.
"""

from __future__ import annotations

from market_timers.ledger import format_fields, parse_fields
from market_timers.ledger.pgconnection import LedgerConnection


class ClusterControls(LedgerConnection):
    """The pauses and halts of a PostgresLedger."""

    def pauses_of(self, job: str, group: str) -> list[tuple[str, str, dict]]:
        """The runner's check: the cluster's pauses of the job and of its lock group, as
        (scope, name, record); a read, given AFTER_DEADLINE_SEC like the peek, so that a late
        start still says "paused" rather than "stale"."""
        rows = self._execute("SELECT * FROM mt_pauses_of($1, $2)", job, group,
                             deadline=self._past_deadline())
        return [(scope, name, parse_fields(fields)) for scope, name, fields in rows]

    def pause_list(self) -> list[tuple[str, str, dict]]:
        rows = self._read("SELECT * FROM mt_pause_list()")
        return [(scope, name, parse_fields(fields)) for scope, name, fields in rows]

    def set_pause(self, scope: str, name: str, fields: dict) -> None:
        self._execute("SELECT mt_pause($1, $2, $3)", scope, name, format_fields(fields))

    def unpause(self, scope: str, name: str) -> bool:
        """True when that pause was in the ledger (and now is not)."""
        rows = self._execute("SELECT mt_unpause($1, $2)", scope, name)
        return int(rows[0][0] or 0) > 0

    # -- halts (ledger/halts.py) ---------------------------------------------------------------

    def halt_list(self) -> list[tuple[str, str, dict]]:
        """Every halt in force, as (scope, name, record); on a start, a read given
        AFTER_DEADLINE_SEC like the peek (a late start still says "halted")."""
        rows = self._execute("SELECT * FROM mt_halt_list()", deadline=self._past_deadline())
        return [(scope, name, parse_fields(fields)) for scope, name, fields in rows]

    def set_halt(self, scope: str, name: str, fields: dict) -> bool:
        """True for the one call that wrote the halt (a scope already halted: False)."""
        rows = self._execute("SELECT mt_halt($1, $2, $3)", scope, name, format_fields(fields))
        return rows[0][0] == "t"

    def unhalt(self, scope: str, name: str) -> bool:
        rows = self._execute("SELECT mt_unhalt($1, $2)", scope, name)
        return int(rows[0][0] or 0) > 0
