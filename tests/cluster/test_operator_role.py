"""Roles hold what they need (issue 44): a node role claims, locks, finishes, reads, and may
halt or pause (a failure pause is the record step's), but cannot lift a halt or a pause: that is
the operator role's, whose DSN is a root-only credential (market-timers.cluster-operator-dsn).
Anything holding a node's DSN (the package user's every process) can no longer lift the kill
switch everywhere; `resume` as root still works through the operator's credential."""

from __future__ import annotations

import pytest
from tests.cluster.test_least_privilege import PERMISSION_DENIED, _role_dsn
from tests.controls.test_halt import FakeSystemctl
from tests.fakes.pgserver import PASSWORD

from market_timers.cli.parser import build_parser
from market_timers.config.loader import load
from market_timers.controls import halt as halt_mod
from market_timers.controls import resume as resume_mod
from market_timers.ledger import DatabaseError
from market_timers.ledger import postgresql as pg

from .test_cluster_halt import _now
from .test_cluster_pause import node_configs

NODES = ("mt_node_a", "mt_node_b")
OPERATOR = "mt_operator"


@pytest.fixture(scope="session")
def roles(pgserver):
    for role in (*NODES, OPERATOR):
        if pgserver.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'").strip() != "1":
            pgserver.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")


@pytest.fixture
def ledger(dsn, roles):
    with pg.connect(dsn) as conn:
        pg.init_schema(conn, NODES, [OPERATOR])
    return {"node": _role_dsn(dsn, NODES[0]), "operator": _role_dsn(dsn, OPERATOR)}


def test_a_node_role_cannot_lift_a_halt_or_a_pause(ledger):
    with pg.connect(ledger["node"]) as node:
        assert node.execute("SELECT mt_halt('orders', '', 'by=x')") == [("t",)]
        node.execute("SELECT mt_pause('failure', 'orders', 'by=x')")
        for sql in ("SELECT mt_unhalt('orders', '')", "SELECT mt_unpause('failure', 'orders')"):
            with pytest.raises(DatabaseError) as e:
                node.execute(sql)
            assert e.value.sqlstate == PERMISSION_DENIED, e.value
    with pg.connect(ledger["operator"]) as operator:
        assert operator.execute("SELECT mt_unhalt('orders', '')") == [("1",)]
        assert operator.execute("SELECT mt_unpause('failure', 'orders')") == [("1",)]


def test_resume_as_root_lifts_the_halt_through_the_operators_credential(
        tmp_path, ledger, monkeypatch, capsys):
    nodes = {n: load(p) for n, p in node_configs(tmp_path, ledger["node"], monkeypatch).items()}
    operator = tmp_path / "operator-role-dsn"
    operator.write_text(ledger["operator"] + "\n")
    monkeypatch.setenv("MARKET_CLUSTER_OPERATOR_DSN_FILE", str(operator))
    assert halt_mod.halt(nodes["ny4-a"], None, None, False, "runaway algo", _now(),
                         systemctl=FakeSystemctl()) == 0
    assert resume_mod.resume(nodes["ny4-b"], None, None, _now()) == 0
    assert "ended the halt of order jobs" in capsys.readouterr().out
    with pg.connect(ledger["node"]) as node:
        assert node.execute("SELECT * FROM mt_halt_list()") == []


def test_resume_with_a_node_dsn_only_says_which_credential_it_needs(tmp_path, ledger,
                                                                   monkeypatch, capsys):
    nodes = {n: load(p) for n, p in node_configs(tmp_path, ledger["node"], monkeypatch).items()}
    monkeypatch.setenv("MARKET_CLUSTER_OPERATOR_DSN_FILE", str(tmp_path / "none"))
    assert halt_mod.halt(nodes["ny4-a"], None, None, False, "runaway algo", _now(),
                         systemctl=FakeSystemctl()) == 0
    assert resume_mod.resume(nodes["ny4-b"], None, None, _now()) == 1
    err = capsys.readouterr().err
    assert "market-timers.cluster-operator-dsn" in err and "nothing was resumed" in err


def test_cluster_init_takes_an_operator_role_on_the_command_line():
    args = build_parser().parse_args(["cluster", "init", "--node-role", "mt_node_a",
                                      "--operator-role", "mt_operator"])
    assert args.operator_role == ["mt_operator"]
