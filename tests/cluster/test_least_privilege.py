"""Least privilege in the cluster ledger (issue 23, item 3): each node connects as its own role,
which may only EXECUTE the ledger's functions (owned by the role that ran `cluster init`); a
process holding one node's DSN can neither touch the tables nor end another node's backends (and
so cannot hand over its lock groups). `cluster init` creates this, and migrates a version-1
ledger to it keeping its rows. Against a real PostgreSQL on loopback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tests.cluster.test_cluster_runner import node_env, start
from tests.fakes.pgserver import PASSWORD, USER

from market_timers.cli import cluster
from market_timers.cli.parser import build_parser
from market_timers.ledger import DatabaseError, Key, pgfunctions
from market_timers.ledger import postgresql as pg

KEY = Key("closing-orders", "2025-11-26")
NODE_ROLES = ("mt_node_a", "mt_node_b")
PERMISSION_DENIED = "42501"


def _role_dsn(dsn: str, role: str, dbname: str | None = None) -> str:
    words = [f"user={role}" if w.startswith("user=") else w for w in dsn.split()]
    if dbname:
        words = [f"dbname={dbname}" if w.startswith("dbname=") else w for w in words]
    return " ".join(words)


@pytest.fixture(scope="session")
def node_roles(pgserver):
    for role in NODE_ROLES:
        if pgserver.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'").strip() != "1":
            pgserver.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
    return NODE_ROLES


@pytest.fixture
def node_dsn(dsn, node_roles):
    """{node: DSN of its own role} on a ledger initialised for both node roles."""
    with pg.connect(dsn) as conn:
        pg.init_schema(conn, node_roles)
    return {"ny4-a": _role_dsn(dsn, "mt_node_a"), "ny4-b": _role_dsn(dsn, "mt_node_b")}


@pytest.fixture
def database(pgserver, request):
    """A new, empty database owned by the owner role: its name."""
    name = "mt_" + re.sub("[^a-z0-9]+", "_", request.node.name.lower())[-40:]
    pgserver.psql(f"DROP DATABASE IF EXISTS {name}")
    pgserver.psql(f"CREATE DATABASE {name} OWNER {USER}")
    yield name
    pgserver.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _denied(conn, sql: str, *params) -> None:
    with pytest.raises(DatabaseError) as e:
        conn.execute(sql, *params)
    assert e.value.sqlstate == PERMISSION_DENIED, e.value
    # PostgreSQL 15 words a refused pg_terminate_backend "must be a member of the role ...";
    # 16 on, "permission denied to terminate process"
    assert "permission denied" in str(e.value) or "must be a member" in str(e.value), e.value


def test_a_node_role_does_every_step_of_a_start_through_the_functions(node_dsn):
    a = pg.PostgresLedger(node_dsn["ny4-a"], "ny4-a")
    b = pg.PostgresLedger(node_dsn["ny4-b"], "ny4-b")
    try:
        assert pg.schema_version(a.conn) == pg.SCHEMA_VERSION
        a.seen("started")
        assert a.holder(KEY) is None
        fd, fence = a.lock_group("orders", KEY)
        assert fd >= 0 and a.check_fence("orders", fence)
        assert b.lock_group("orders", KEY) is None
        assert b.lock_holder("orders")["node"] == "ny4-a"
        claim = a.claim(KEY, "timer", {"invocation": "inv-a", "pid": 1})
        assert claim.ok and claim.fence
        lost = b.claim(KEY, "timer", {"invocation": "inv-b"})
        assert not lost.ok and lost.holder["node"] == "ny4-a"
        b.refuse(KEY, {"invocation": "inv-b", "refused": "already-ran"})
        b.finish(KEY, "inv-b", {"result": "already-ran"})
        a.finish(KEY, "inv-a", {"result": "success", "exit_status": "0"})
        assert [r["result"] for r in b.attempts(KEY)] == ["success"]
        assert [r["result"] for r in a.refusals(KEY)] == ["already-ran"]
        assert a.keys("closing-orders") == [KEY]
        assert b.note_miss(Key("report", "2025-11-26")) is True
        assert a.note_miss(Key("report", "2025-11-26")) is False
        assert [n["node"] for n in b.nodes()] == ["ny4-a"]
        assert b.runs()[0]["node"] == "ny4-a"
        a.write_ticket("n1", {"job": KEY.job, "session": KEY.session, "force": "yes"})
        assert b.take_ticket("n1", KEY)["force"] == "yes"
        forced = b.claim(KEY, "forced", {"invocation": "inv-b2"})
        assert forced.ok and forced.attempt == 2
    finally:
        a.close()
        b.close()
    assert not a.check_fence("orders", fence)  # its connection closed: the lock is gone


def test_the_runner_starts_a_job_as_a_node_role(tmp_path, node_dsn):
    log = tmp_path / "orders.log"
    proc = start(node_env(tmp_path, node_dsn["ny4-a"], "ny4-a"),
                 f'echo "$MARKET_NODE fence=$MARKET_FENCE" >> {log}')
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert log.read_text().startswith("ny4-a fence=")


def test_a_process_with_a_nodes_dsn_cannot_touch_the_tables(node_dsn):
    a = pg.PostgresLedger(node_dsn["ny4-a"], "ny4-a")
    assert a.claim(KEY, "timer", {"invocation": "inv-a"}).ok
    a.close()
    with pg.connect(node_dsn["ny4-b"]) as hostile:
        _denied(hostile, "DELETE FROM mt_runs")
        _denied(hostile, "UPDATE mt_runs SET finished_at = now(), result = 'failed'")
        _denied(hostile, "SELECT * FROM mt_runs")
        _denied(hostile, "INSERT INTO mt_locks (grp, fence, node, job, session, backend_pid) "
                         "VALUES ('orders', 1, 'x', 'x', 'x', 1)")
        _denied(hostile, "TRUNCATE mt_runs")
        _denied(hostile, "SELECT nextval('mt_fence')")
        _denied(hostile, "UPDATE mt_schema SET version = 1")
    assert pg.PostgresLedger(node_dsn["ny4-b"], "ny4-b").holder(KEY)["node"] == "ny4-a"


def test_another_nodes_role_cannot_withdraw_or_finish_this_nodes_claim(node_dsn):
    a = pg.PostgresLedger(node_dsn["ny4-a"], "ny4-a")
    assert a.claim(KEY, "timer", {"invocation": "inv-a"}).ok
    with pg.connect(node_dsn["ny4-b"]) as hostile:
        # the functions with node a's name and invocation: nothing of node a's changes
        assert hostile.execute("SELECT mt_withdraw($1, $2, $3, 'ny4-a', 'inv-a', NULL)",
                               KEY.job, KEY.session, KEY.slot) == [("0",)]
        assert hostile.execute("SELECT mt_finish($1, $2, $3, 'inv-a', 'failed', '')",
                               KEY.job, KEY.session, KEY.slot) == [(None,)]
    b = pg.PostgresLedger(node_dsn["ny4-b"], "ny4-b")
    assert b.holder(KEY)["node"] == "ny4-a"
    assert b.attempts(KEY)[0].get("result") is None  # still running
    assert not b.claim(KEY, "retry", {"invocation": "inv-b"}).ok  # no second attempt
    assert a.withdraw(KEY, "inv-a")  # its own claim: taken back
    assert b.holder(KEY) is None


HOLD = """
import os, sys
from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg
ledger = pg.PostgresLedger(sys.argv[1], sys.argv[2])
fd, fence = ledger.lock_group("orders", Key("closing-orders", "2025-11-26"))
os.set_inheritable(fd, True)
print(f"fence {fence}", flush=True)
os.execvp("sleep", ["sleep", "300"])
"""


def test_pg_terminate_backend_cannot_hand_another_nodes_lock_group_over(node_dsn):
    """Node b's job holds the lock group; a process with node a's DSN tries to end b's backend
    (pg_terminate_backend, which a role may do to its own backends): refused, and the group
    stays b's."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, node_dsn["ny4-b"], "ny4-b"],
                              stdout=subprocess.PIPE, text=True)
    try:
        fence = holder.stdout.readline().split()[1]
        with pg.connect(node_dsn["ny4-a"]) as hostile:
            pids = [p for (p,) in hostile.execute(
                "SELECT pid FROM pg_stat_activity WHERE usename = 'mt_node_b'")]
            assert pids
            for pid in pids:
                _denied(hostile, "SELECT pg_terminate_backend($1)", pid)
        a = pg.PostgresLedger(node_dsn["ny4-a"], "ny4-a")
        assert a.lock_group("orders", KEY) is None
        assert a.check_fence("orders", fence)
        a.close()
    finally:
        holder.kill()
        holder.wait()


def _init(tmp_path, dsn: str, roles, capsys) -> tuple[int, str, str]:
    dsn_file = tmp_path / "owner-dsn"
    dsn_file.write_text(dsn + "\n")
    code = cluster.init(None, str(dsn_file), list(roles))
    out, err = capsys.readouterr()
    return code, out, err


def test_cluster_init_creates_the_ledger_for_the_node_roles_and_is_idempotent(
        tmp_path, pgserver, database, node_roles, capsys):
    owner = _role_dsn(pgserver.dsn, USER, database)
    code, out, err = _init(tmp_path, owner, node_roles, capsys)
    assert code == 0, err
    assert f"ledger schema created (version {pg.SCHEMA_VERSION})" in out
    assert "mt_node_a, mt_node_b" in out
    code, out, err = _init(tmp_path, owner, node_roles, capsys)
    assert code == 0, err
    assert f"up to date (version {pg.SCHEMA_VERSION})" in out
    node = _role_dsn(pgserver.dsn, "mt_node_a", database)
    ledger = pg.PostgresLedger(node, "ny4-a")
    assert ledger.claim(KEY, "timer", {}).ok
    ledger.close()
    with pg.connect(node) as hostile:
        _denied(hostile, "DELETE FROM mt_runs")


def test_cluster_init_upgrades_a_version_1_ledger_and_keeps_its_rows(
        tmp_path, pgserver, database, node_roles, capsys):
    owner = _role_dsn(pgserver.dsn, USER, database)
    with pg.connect(owner) as conn:  # a ledger as today's (version 1) `cluster init` left it
        conn.execute("CREATE TABLE mt_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO mt_schema VALUES (1)")
        for statement in dict(pg.MIGRATIONS)[1]("public"):
            conn.execute(statement)
        conn.execute("INSERT INTO mt_runs (job, session, slot, attempt, how, node, fence, "
                     "invocation, fields) VALUES ($1, $2, '', 1, 'timer', 'ny4-a', "
                     "nextval('mt_fence'), 'inv-old', 'pid=7\nnode=ny4-a\n')",
                     KEY.job, KEY.session)
        conn.execute("INSERT INTO mt_refusals (job, session, node, invocation, fields) VALUES "
                     "($1, $2, 'ny4-b', 'inv-b', 'refused=already-ran\n')", KEY.job, KEY.session)
        conn.execute("INSERT INTO mt_locks (grp, fence, node, job, session, backend_pid, "
                     "backend_start) VALUES ('orders', nextval('mt_fence'), 'ny4-a', 'x', 'y', "
                     "1, now())")
    old = pg.PostgresLedger(owner, "ny4-a")
    with pytest.raises(DatabaseError, match="run `market-timers cluster init`"):
        old.holder(KEY)  # this code on a version-1 ledger: says what to do
    old.close()
    code, out, err = _init(tmp_path, owner, node_roles, capsys)
    assert code == 0, err
    assert f"migrated from version 1 to {pg.SCHEMA_VERSION}" in out
    with pg.connect(owner) as conn:  # a version-1 runner (owner's role) still takes a group
        conn.execute(
            "INSERT INTO mt_locks (grp, fence, node, job, session, backend_pid, backend_start) "
            "SELECT 'books', nextval('mt_fence'), 'ny4-a', 'x', 'y', pg_backend_pid(), "
            "backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
    b = pg.PostgresLedger(_role_dsn(pgserver.dsn, "mt_node_b", database), "ny4-b")
    assert b.holder(KEY)["pid"] == 7
    assert [r["refused"] for r in b.refusals(KEY)] == ["already-ran"]
    assert b.lock_holder("orders")["node"] == "ny4-a"
    fd, fence = b.lock_group("orders", KEY)  # the old holder's backend is gone
    assert int(fence) > 2
    a = pg.PostgresLedger(_role_dsn(pgserver.dsn, "mt_node_a", database), "ny4-a")
    a.finish(KEY, "inv-old", {"result": "success"})  # a run claimed before the upgrade
    assert b.attempts(KEY)[0]["result"] == "success"
    b.close()
    a.close()
    with pg.connect(_role_dsn(pgserver.dsn, "mt_node_a", database)) as hostile:
        _denied(hostile, "DELETE FROM mt_runs")
    code, out, err = _init(tmp_path, owner, node_roles, capsys)
    assert code == 0 and "up to date" in out, err


def test_cluster_init_upgrades_a_version_2_ledger_to_pauses_for_every_node(
        tmp_path, pgserver, database, node_roles, capsys):
    owner = _role_dsn(pgserver.dsn, USER, database)
    with pg.connect(owner) as conn:  # a ledger as version 2's `cluster init` left it
        conn.execute("CREATE TABLE mt_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO mt_schema VALUES (2)")
        for version in (1, 2):
            for statement in dict(pg.MIGRATIONS)[version]("public"):
                conn.execute(statement)
        for statement in pgfunctions.create_functions("public"):
            if not any(w in statement.split("(")[0] for w in ("pause", "halt", "clock")) \
                    and "double precision" not in statement.split(")")[0]:  # v3, v4, v5
                conn.execute(statement)
        conn.execute("INSERT INTO mt_runs (job, session, slot, attempt, how, node, fence, "
                     "invocation, fields) VALUES ($1, $2, '', 1, 'timer', 'ny4-a', "
                     "nextval('mt_fence'), 'inv-old', 'pid=7\nnode=ny4-a\n')",
                     KEY.job, KEY.session)
    code, out, err = _init(tmp_path, owner, node_roles, capsys)
    assert code == 0, err
    assert f"migrated from version 2 to {pg.SCHEMA_VERSION}" in out
    b = pg.PostgresLedger(_role_dsn(pgserver.dsn, "mt_node_b", database), "ny4-b")
    assert b.holder(KEY)["pid"] == 7  # the rows kept
    b.set_pause("group", "orders", {"by": "alice", "note": "new API"})
    a = pg.PostgresLedger(_role_dsn(pgserver.dsn, "mt_node_a", database), "ny4-a")
    assert a.pauses_of(KEY.job, "orders") == [("group", "orders",
                                                {"by": "alice", "note": "new API"})]
    a.close()
    b.close()
    with pg.connect(_role_dsn(pgserver.dsn, "mt_node_a", database)) as hostile:
        _denied(hostile, "DELETE FROM mt_pauses")
        _denied(hostile, "SELECT * FROM mt_pauses")


@pytest.mark.parametrize("role, says", [
    ("mt_nobody", "does not exist: create it first"),
    (USER, "is the owner role"),
])
def test_cluster_init_refuses_a_bad_node_role(tmp_path, pgserver, database, role, says, capsys):
    owner = _role_dsn(pgserver.dsn, USER, database)
    code, out, err = _init(tmp_path, owner, [role], capsys)
    assert code == 1
    assert f"node role '{role}'" in err and says in err, err
    with pg.connect(owner) as conn:  # nothing was created: the whole init is one transaction
        assert pg.schema_version(conn) == 0


def test_cluster_init_takes_node_roles_on_the_command_line():
    args = build_parser().parse_args(["cluster", "init", "--node-role", "mt_node_a",
                                      "--node-role", "mt_node_b"])
    assert args.node_role == ["mt_node_a", "mt_node_b"]


def test_the_node_roles_dsn_reaches_no_table_even_through_search_path(node_dsn):
    """A caller's own objects are never resolved inside the functions: search_path is pinned
    (pg_temp last), so a temporary mt_runs of the caller does not capture a claim."""
    with pg.connect(node_dsn["ny4-b"]) as conn:
        conn.execute("CREATE TEMP TABLE mt_runs (job text, session text, slot text, "
                     "attempt integer, how text, node text, fence bigint, invocation text, "
                     "fields text, claimed_by text)")
        conn.execute("SELECT mt_claim($1, $2, '', 1, 'timer', 'ny4-b', 'i', '', 'w')",
                     KEY.job, KEY.session)
        assert conn.execute("SELECT count(*) FROM pg_temp.mt_runs") == [("0",)]
    assert pg.PostgresLedger(node_dsn["ny4-a"], "x").holder(KEY)["node"] == "ny4-b"
