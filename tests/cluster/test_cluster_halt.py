"""The kill switch in a cluster: a halt made on one node refuses the starts on every node, stops
the runs another node's listener (halt-watch) sees, and runs on_halt once in the cluster; a
resume on any node ends it everywhere. Against a real PostgreSQL on loopback."""

from __future__ import annotations

import threading

import pytest
from tests.controls.test_halt import FakeSystemctl

from market_timers.config.loader import load
from market_timers.contracts import exitcodes
from market_timers.controls import halt as halt_mod
from market_timers.controls import haltwatch
from market_timers.controls import resume as resume_mod
from market_timers.ledger import halts
from market_timers.ledger import postgresql as pg

from .test_cluster_pause import CONFIG as PAUSE_CONFIG
from .test_cluster_pause import node_configs
from .test_cluster_runner import node_env, start

CONFIG = 'on_halt = ["/usr/local/bin/cancel-all"]\n' + PAUSE_CONFIG
ORDERS_UNIT = "market-closing-orders@2025-11-26-205000.service"


@pytest.fixture
def nodes(tmp_path, dsn, monkeypatch):
    """node name -> its loaded config."""
    return {node: load(path) for node, path in
            node_configs(tmp_path, dsn, monkeypatch, CONFIG).items()}


def halt(config, systemd, **kw) -> int:
    return halt_mod.halt(config, kw.get("job"), kw.get("group"), kw.get("all_jobs", False),
                         "runaway algo", _now(), systemctl=systemd)


def _now():
    from datetime import UTC, datetime

    return datetime(2025, 11, 26, 20, 0, tzinfo=UTC)


def test_a_halt_on_one_node_refuses_the_starts_on_the_other_and_runs_on_halt_once(
        tmp_path, dsn, nodes, capsys):
    a, b = FakeSystemctl(), FakeSystemctl()
    assert halt(nodes["ny4-a"], a) == 0
    assert "every node" in capsys.readouterr().out
    marker = tmp_path / "ran"
    env = dict(node_env(tmp_path, dsn, "ny4-b"), MARKET_ORDERS="1")
    proc = start(env, f"touch {marker}")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.HALTED == 178, err
    assert not marker.exists()
    assert "runaway algo" in err and "market-timers resume --orders" in err
    # the same halt made on the other node too: the cluster has it, on_halt is not run again
    assert halt(nodes["ny4-b"], b) == 0
    assert "already halted" in capsys.readouterr().out
    ran = [t[1][-2:] for t in a.transient + b.transient]  # supervised: runner --supervise --
    assert ran == [["--", "/usr/local/bin/cancel-all"]]
    # a job that is not an order job still runs on either node
    other = start(dict(node_env(tmp_path, dsn, "ny4-b", job="signal")), "true")
    assert other.wait(timeout=30) == 0


def test_a_resume_on_the_other_node_ends_the_halt_everywhere(tmp_path, dsn, nodes, capsys):
    assert halt(nodes["ny4-a"], FakeSystemctl()) == 0
    assert resume_mod.resume(nodes["ny4-b"], None, None, _now()) == 0
    assert "ended the halt of order jobs" in capsys.readouterr().out
    for node in ("ny4-a", "ny4-b"):  # no record is left on the node that made it
        env = dict(node_env(tmp_path, dsn, node), MARKET_ORDERS="1",
                   MARKET_SESSION=f"2025-11-2{7 if node == 'ny4-a' else 8}")
        proc = start(env, "true")
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def test_status_of_the_other_node_lists_the_halt(dsn, nodes):
    assert halt(nodes["ny4-a"], FakeSystemctl(), group="orders") == 0
    book = pg.PostgresLedger(dsn, "ny4-b")
    held = halts.current(str(nodes["ny4-b"].state_dir), halts.cluster_records(book))
    book.close()
    assert [(h["what"], h["reason"], h["by"]) for h in held] == \
        [("lock group orders", "runaway algo", held[0]["by"])]


def test_the_other_nodes_listener_stops_its_running_order_job(dsn, nodes):
    """halt-watch on ny4-b LISTENs: a halt made on ny4-a wakes it (well before its recheck),
    and it stops the order job running on ny4-b, not the others."""
    b = FakeSystemctl([ORDERS_UNIT, "market-statement@2025-11-26-213000.service"])
    listener = threading.Thread(target=haltwatch.watch, args=(nodes["ny4-b"],),
                                kwargs={"systemctl": b, "passes": 2}, daemon=True)
    listener.start()
    while not b.stopped and listener.is_alive() and not _listening(dsn):
        listener.join(0.05)
    assert halt(nodes["ny4-a"], FakeSystemctl()) == 0
    listener.join(haltwatch.RECHECK_SEC - 5)  # a notification, not the recheck, woke it
    assert not listener.is_alive(), "halt-watch did not wake at the halt's notification"
    assert b.stopped == [ORDERS_UNIT]


def _listening(dsn: str) -> bool:
    with pg.connect(dsn) as conn:
        # its first look follows its LISTEN: once that query shows, it listens
        rows = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                            "'%mt_halt_list()%' AND pid <> pg_backend_pid()")
    return rows[0][0] != "0"


def test_the_listener_without_a_cluster_has_nothing_to_watch(write_config, capsys):
    config = load(write_config('calendar = "XNYS"\n'))
    assert haltwatch.watch(config, systemctl=FakeSystemctl(), passes=1) == 0
    assert "nothing to watch" in capsys.readouterr().err


def test_a_halt_that_cannot_reach_the_ledger_holds_this_node_and_says_so(tmp_path, nodes,
                                                                        monkeypatch, capsys):
    from tests.fakes.pgserver import free_port

    dead = tmp_path / "dead-dsn"
    dead.write_text(f"host=127.0.0.1 port={free_port()} dbname=x user=x connect_timeout=2\n")
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(dead))
    assert halt(nodes["ny4-a"], FakeSystemctl()) == exitcodes.FAILURE
    assert "holds on this node only" in capsys.readouterr().err
    held = halts.halted(str(nodes["ny4-a"].state_dir), "closing-orders", "orders", True)
    assert held is not None and held["reason"] == "runaway algo"


def test_the_other_nodes_metrics_show_the_halt(nodes):
    from market_timers.metrics.families import collect

    assert halt(nodes["ny4-a"], FakeSystemctl()) == 0
    (nodes["ny4-b"].state_dir / "metrics").mkdir(parents=True)
    halted = {f.name: f for f in collect(nodes["ny4-b"], _now())}["halted"]
    assert halted.samples == [({"scope": "orders", "name": ""}, 1.0)]


def test_the_other_nodes_digest_lists_the_halt(nodes, capsys):
    from market_timers.alerts.commands import digest

    assert halt(nodes["ny4-a"], FakeSystemctl()) == 0
    capsys.readouterr()
    assert digest(nodes["ny4-b"], "2025-11-26", now=_now) == 0
    assert "Halt in force: order jobs (orders = true)" in capsys.readouterr().out
