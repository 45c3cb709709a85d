"""`market-timers cluster check` (issue 44): refuses a ledger whose schema PUBLIC or a node role
may create objects in, and a DSN naming several hosts (a failover) on a PostgreSQL whose commits
do not wait for a synchronous standby: a claim committed on the primary could be missing on the
promoted standby, and the session run twice."""

from __future__ import annotations

import pytest
from tests.cluster.test_least_privilege import _role_dsn, database, node_roles  # noqa: F401
from tests.fakes.pgserver import USER

from market_timers.cli import cluster
from market_timers.cli.parser import build_parser
from market_timers.ledger import postgresql as pg


@pytest.fixture
def owner(pgserver, database, node_roles):  # noqa: F811
    dsn = _role_dsn(pgserver.dsn, USER, database)
    with pg.connect(dsn) as conn:
        pg.init_schema(conn, node_roles)
    return dsn


def _check(tmp_path, dsn, capsys):
    path = tmp_path / "dsn"
    path.write_text(dsn + "\n")
    code = cluster.check(None, str(path))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_hardened_ledger_on_one_host_passes(tmp_path, owner, node_roles, capsys):  # noqa: F811
    code, said = _check(tmp_path, _role_dsn(owner, node_roles[0]), capsys)
    assert code == 0, said
    assert "no one but the owner may create" in said


def test_a_schema_public_may_create_in_is_refused(tmp_path, pgserver, database, owner,  # noqa: F811
                                                  capsys):
    pgserver.psql("GRANT CREATE ON SCHEMA public TO PUBLIC", db=database)
    code, said = _check(tmp_path, owner, capsys)
    assert code == 1
    assert "PUBLIC" in said and "CREATE" in said


def test_several_hosts_without_a_synchronous_standby_are_refused(tmp_path, owner, capsys):
    words = owner.split()
    host = next(w for w in words if w.startswith("host="))[5:]
    port = next(w for w in words if w.startswith("port="))[5:]
    two = " ".join(w for w in words if not w.startswith(("host=", "port=")))
    two += f" host={host},{host} port={port},{port} target_session_attrs=read-write"
    code, said = _check(tmp_path, two, capsys)
    assert code == 1
    assert "synchronous_standby_names" in said and "twice" in said


def test_cluster_check_is_a_command():
    assert build_parser().parse_args(["cluster", "check"]).action == "check"
