"""`cluster init` hardens the ledger's schema (issue 44): where PUBLIC may CREATE in it (the
default up to PostgreSQL 14, kept by upgrades) a node role planted public.hashtextextended(text,
integer), which beat pg_catalog's inside the SECURITY DEFINER functions, and one mt_lock later
ran as the owner (the CVE-2018-1058 pattern). init revokes that right, refuses a schema where a
node role may still create, and every function calls the built-ins as pg_catalog's."""

from __future__ import annotations

import re

import pytest
from tests.cluster.test_least_privilege import _denied, _role_dsn, database, node_roles  # noqa: F401
from tests.fakes.pgserver import USER

from market_timers.ledger import DatabaseError, Key, pgfunctions
from market_timers.ledger import postgresql as pg
from market_timers.ledger.pgcheck import findings

PLANT = ("CREATE FUNCTION public.hashtextextended(text, integer) RETURNS bigint "
         "LANGUAGE sql AS 'SELECT 0::bigint'")
KEY = Key("closing-orders", "2025-11-26")
BUILT_INS = ("nextval", "now", "clock_timestamp", "round", "abs", "count", "max",
             "pg_try_advisory_lock", "hashtextextended", "pg_backend_pid", "pg_notify")


@pytest.fixture
def owner_dsn(pgserver, database):  # noqa: F811
    return _role_dsn(pgserver.dsn, USER, database)


def test_init_takes_create_on_the_schema_from_public(pgserver, database, owner_dsn,  # noqa: F811
                                                     node_roles):  # noqa: F811
    pgserver.psql("GRANT CREATE ON SCHEMA public TO PUBLIC", db=database)
    with pg.connect(owner_dsn) as conn:
        pg.init_schema(conn, node_roles)
    with pg.connect(_role_dsn(owner_dsn, node_roles[1])) as hostile:
        _denied(hostile, PLANT)


def test_init_refuses_a_schema_where_a_node_role_may_still_create(pgserver, database,  # noqa: F811
                                                                  owner_dsn, node_roles):  # noqa: F811
    """A right init cannot take back (through a group role): refused, nothing created."""
    pgserver.psql("DROP ROLE IF EXISTS mt_planters; CREATE ROLE mt_planters; "
                  f"GRANT mt_planters TO {node_roles[0]}", db=database)
    pgserver.psql("GRANT CREATE ON SCHEMA public TO mt_planters", db=database)
    try:
        with pg.connect(owner_dsn) as conn, pytest.raises(DatabaseError) as e:
            pg.init_schema(conn, node_roles)
        assert node_roles[0] in str(e.value) and "CREATE" in str(e.value)
        with pg.connect(owner_dsn) as conn:
            assert pg.schema_version(conn) == 0
    finally:
        pgserver.psql("DROP OWNED BY mt_planters; DROP ROLE mt_planters", db=database)


def test_every_function_calls_the_built_ins_as_pg_catalogs(owner_dsn, node_roles):  # noqa: F811
    with pg.connect(owner_dsn) as conn:
        pg.init_schema(conn, node_roles)
        rows = conn.execute("SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'mt\\_%'")
    assert len({name for name, _ in rows}) == len({s.split("(")[0]
                                                   for s, _ in pgfunctions.FUNCTIONS})
    unqualified = re.compile(r"(?<![\w.])(" + "|".join(BUILT_INS) + r")\s*\(")
    for name, source in rows:
        assert not unqualified.search(source), (name, unqualified.findall(source))
    assert all("hashtextextended" not in src or "0::bigint" in src for _, src in rows)


def test_the_ledger_in_a_schema_of_its_own_named_by_every_dsns_search_path(
        pgserver, database, owner_dsn, node_roles):  # noqa: F811
    """The man page's recipe for a database shared with other applications (market-timers(1),
    cluster init): a schema of the owner's, named by the owner's and each node's DSN. init puts
    the ledger there and leaves public as the other applications have it; a node claims through
    it; `cluster check` finds no one but the owner may create beside the ledger."""
    pgserver.psql(f"CREATE SCHEMA market_timers AUTHORIZATION {USER}", db=database)
    pgserver.psql("GRANT CREATE ON SCHEMA public TO PUBLIC", db=database)  # theirs, not ours
    own = " options=-csearch_path=market_timers"
    with pg.connect(owner_dsn + own) as conn:
        pg.init_schema(conn, node_roles)
        assert conn.execute("SELECT DISTINCT n.nspname FROM pg_proc p JOIN pg_namespace n ON "
                            "n.oid = p.pronamespace WHERE p.proname LIKE 'mt\\_%'") == \
            [("market_timers",)]
        assert conn.execute("SELECT has_schema_privilege('public', 'public', 'CREATE')") == \
            [("t",)]
        good, bad = findings(conn, owner_dsn + own)
    assert bad == [] and any("'market_timers'" in line for line in good), (good, bad)
    node = pg.PostgresLedger(_role_dsn(owner_dsn, node_roles[0]) + own, "ny4-a")
    try:
        assert node.claim(KEY, "timer", {"invocation": "inv-a", "pid": 1}).ok
        node.finish(KEY, "inv-a", {"result": "success", "exit_status": "0"})
        assert [r["result"] for r in node.attempts(KEY)] == ["success"]
    finally:
        node.close()
    with pg.connect(_role_dsn(owner_dsn, node_roles[1]) + own) as hostile:
        _denied(hostile, "CREATE FUNCTION market_timers.hashtextextended(text, integer) "
                         "RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'")
