"""The deadman, status and sync in cluster mode: "ran" means ran on any node (the PostgreSQL
ledger), a miss is alerted once across the cluster, and an unreachable ledger is one critical
alert, never a flood of misses (issue 10 section 2, item 6)."""

from __future__ import annotations

import json
import textwrap
from datetime import date
from pathlib import Path

import pytest
from tests.fakes.pgserver import free_port
from tests.watch.conftest import THANKSGIVING_CONFIG, AlertRecorder, FakeSystemctl, utc

from market_timers.config import loader as config_mod
from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg
from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman, status

SESSION = "2025-11-25"  # signal due 20:45 UTC, missed after 20:52:30
AFTER_DEADLINE = utc("2025-11-25T22:00:00Z")
SYNCED = utc("2025-11-21T22:00:00Z")  # Friday after the close: plan.json covers 10 sessions


class Node:
    """One node: its own config (node name, state dir, units) and fake systemd."""

    def __init__(self, tmp_path: Path, name: str):
        root = tmp_path / name
        root.mkdir()
        text = (f'unit_dir = "{root}/units"\nstate_dir = "{root}/state"\n'
                f'spool_dir = "{root}/spool"\nruntime_dir = "{root}/run"\n'
                + textwrap.dedent(THANKSGIVING_CONFIG)
                + f'\n[cluster]\nnode = "{name}"\nstandby_delay = "0s"\n')
        (root / "market-timers.toml").write_text(text)
        self.config = config_mod.load(root / "market-timers.toml")
        self.systemctl = FakeSystemctl(root / "units")
        self.alerts = AlertRecorder()

    def sync(self, now=SYNCED):
        self.systemctl.now = now
        return sync_mod.sync(self.config, now=now, systemctl=self.systemctl,
                             stamp_dir=Path(self.config.state_dir) / "stamps")

    def deadman(self, now=AFTER_DEADLINE):
        self.systemctl.now = now
        return deadman.run_pass(self.config, now, systemctl=self.systemctl, alert=self.alerts,
                                env={})


def use_dsn(monkeypatch, tmp_path: Path, dsn: str) -> None:
    path = tmp_path / "cluster-dsn"
    path.write_text(dsn + "\n")
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(path))


@pytest.fixture
def nodes(tmp_path, dsn, monkeypatch):
    use_dsn(monkeypatch, tmp_path, dsn)
    a, b = Node(tmp_path, "ny4-a"), Node(tmp_path, "ny4-b")
    a.sync()
    b.sync()
    return a, b


def claim_on(dsn: str, node: str, session: str = SESSION) -> None:
    book = pg.PostgresLedger(dsn, node)
    claim = book.claim(Key("signal", session), "timer",
                       {"started_utc": f"{session}T20:45:00Z", "invocation": f"inv-{node}"})
    assert claim.ok
    book.finish(Key("signal", session), f"inv-{node}", {"result": "success", "exit_status": "0"})
    book.close()


def missed(alerts: AlertRecorder) -> list[str]:
    return [c["session"] for c in alerts.calls if c["kind"] == "missed"]


def test_a_run_on_the_other_node_is_not_a_miss(nodes, dsn):
    a, b = nodes
    for session in ("2025-11-24", SESSION):
        claim_on(dsn, "ny4-a", session)
    result = b.deadman()
    assert [f for f in result.findings if f.kind == "missed"] == []
    assert b.alerts.calls == []


def test_a_miss_is_alerted_by_one_node_only_and_only_once(nodes, dsn):
    a, b = nodes
    claim_on(dsn, "ny4-a", "2025-11-24")
    b.deadman()  # the standby looks first: it reports the miss
    a.deadman()
    b.deadman()
    a.deadman()
    assert missed(b.alerts) == [SESSION]
    assert missed(a.alerts) == []
    with pg.connect(dsn) as conn:
        assert conn.execute("SELECT node FROM mt_misses WHERE job = 'signal'") == [("ny4-b",)]


def test_a_dead_preferred_node_is_reported_by_the_standby(nodes, dsn):
    a, b = nodes  # ny4-a never runs its deadman (powered off)
    claim_on(dsn, "ny4-a", "2025-11-24")
    b.deadman()
    assert missed(b.alerts) == [SESSION]


def test_a_run_that_fell_back_to_the_local_ledger_is_not_a_miss(nodes, dsn):
    from market_timers.ledger import runrecord

    a, b = nodes
    claim_on(dsn, "ny4-a", "2025-11-24")
    runrecord.update(a.config.state_dir, "signal", SESSION, started_utc=f"{SESSION}T20:45:00Z",
                     result="success", exit_status="0")
    a.deadman()
    assert missed(a.alerts) == []


def test_an_unreachable_ledger_is_one_critical_alert_not_a_flood_of_misses(
        nodes, dsn, tmp_path, monkeypatch):
    a, _ = nodes
    use_dsn(monkeypatch, tmp_path, f"host=127.0.0.1 port={free_port()} dbname=x user=x")
    first = a.deadman()
    second = a.deadman()
    assert a.alerts.kinds() == ["ledger-unreachable"]
    (call,) = a.alerts.calls
    assert "ny4-a" in call["text"] and "cannot be reached" in call["text"]
    assert first.failed and second.failed  # the heartbeat pings /fail while it lasts
    assert [f.kind for f in second.findings] == ["ledger-unreachable"]
    # Back: the miss is reported now, and the next outage is reported again.
    use_dsn(monkeypatch, tmp_path, dsn)
    back = a.deadman()
    assert not back.errors
    assert a.alerts.kinds() == ["ledger-unreachable", "missed", "missed"]  # 24th and 25th
    use_dsn(monkeypatch, tmp_path, f"host=127.0.0.1 port={free_port()} dbname=x user=x")
    a.deadman()
    assert a.alerts.kinds()[-1] == "ledger-unreachable"
    assert a.alerts.kinds().count("ledger-unreachable") == 2


def test_without_the_dsn_credential_the_deadman_says_so(nodes, tmp_path, monkeypatch):
    a, _ = nodes
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(tmp_path / "nowhere"))
    result = a.deadman()
    assert a.alerts.kinds() == ["ledger-unreachable"]
    assert "cannot read the cluster DSN credential" in result.errors[0]


def test_status_shows_which_node_ran_each_job(nodes, dsn, capsys):
    a, b = nodes
    claim_on(dsn, "ny4-b", SESSION)
    assert status.command(a.config, None, True, AFTER_DEADLINE, systemctl=a.systemctl) == 0
    doc = json.loads(capsys.readouterr().out)
    (job,) = [j for s in doc["sessions"] if s["session"] == SESSION for j in s["jobs"]]
    assert (job["node"], job["result"]) == ("ny4-b", "success")
    assert doc["cluster"] == {"node": "ny4-a", "ledger_error": None}
    assert status.command(a.config, date.fromisoformat(SESSION), False, AFTER_DEADLINE,
                          systemctl=a.systemctl) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    row = [line.split() for line in lines if line[4:14] == SESSION][0]
    # the session (weekday, date) and the exchange time (time, zone) are two words each
    assert head[6] == "NODE" and row[8] == "ny4-b"


def test_status_with_the_ledger_unreachable_says_so(nodes, tmp_path, monkeypatch, capsys):
    a, _ = nodes
    use_dsn(monkeypatch, tmp_path, f"host=127.0.0.1 port={free_port()} dbname=x user=x")
    assert status.command(a.config, None, False, AFTER_DEADLINE, systemctl=a.systemctl) == 0
    out = capsys.readouterr().out
    assert "the cluster run ledger cannot be reached" in out


def test_status_with_the_ledger_unreachable_shows_the_runs_of_this_nodes_local_ledger(
        nodes, tmp_path, monkeypatch, capsys):
    """The docstring's promise: with the cluster ledger down, status says so and shows what
    this node's local ledger holds (a run that fell back to it), never "missed" for it."""
    from market_timers.ledger import runrecord

    a, _ = nodes
    runrecord.update(a.config.state_dir, "signal", SESSION, started_utc=f"{SESSION}T20:45:00Z",
                     result="success", exit_status="0")
    use_dsn(monkeypatch, tmp_path, f"host=127.0.0.1 port={free_port()} dbname=x user=x")
    assert status.command(a.config, None, True, AFTER_DEADLINE, systemctl=a.systemctl) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "cannot be reached" in doc["cluster"]["ledger_error"]
    (job,) = [j for s in doc["sessions"] if s["session"] == SESSION for j in s["jobs"]]
    assert job["result"] == "success"


def test_sync_with_the_ledger_unreachable_installs_the_timers(tmp_path, monkeypatch, capsys):
    use_dsn(monkeypatch, tmp_path, f"host=127.0.0.1 port={free_port()} dbname=x user=x")
    a = Node(tmp_path, "ny4-a")
    result = a.sync()
    assert any(n.startswith("market-signal@2025-11-24") for n in result.started)
    assert "cluster run ledger cannot be reached" in capsys.readouterr().err


def test_sync_withdraws_the_timer_of_a_session_another_node_ran(nodes, dsn):
    a, _ = nodes
    claim_on(dsn, "ny4-b", "2025-11-24")
    result = a.sync(utc("2025-11-24T12:00:00Z"))
    timers = {p.name for p in Path(a.config.unit_dir).glob("market-signal@2025-11-24*.timer")}
    assert timers == set(), result
