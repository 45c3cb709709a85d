from __future__ import annotations

import os

import pytest
from tests.fakes.pgserver import PgServer, missing

from market_timers.ledger import postgresql as pg


@pytest.fixture(scope="session")
def pgserver():
    reason = missing()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"cluster tests: {reason} (CI=true: a missing prerequisite is a failure)",
                        pytrace=False)
        pytest.skip(f"cluster tests: {reason}")
    server = PgServer().start()
    yield server
    server.destroy()


@pytest.fixture
def dsn(pgserver):
    """A DSN on a freshly initialised ledger schema (tables emptied between tests)."""
    with pg.connect(pgserver.dsn) as conn:
        pg.init_schema(conn)
        conn.execute("TRUNCATE mt_nodes, mt_runs, mt_refusals, mt_tickets, mt_locks, mt_misses, "
                     "mt_pauses, mt_halts")
    return pgserver.dsn


@pytest.fixture(autouse=True)
def halt_mirror(tmp_path, monkeypatch):
    """halt-watch's mirror of the halts (ledger/haltmirror.py) in the test's own directory,
    never the host's /var/lib/market-halt-watch."""
    path = tmp_path / "halt-mirror"
    monkeypatch.setenv("MARKET_HALT_MIRROR_DIR", str(path))
    return path
