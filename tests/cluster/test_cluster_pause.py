"""Pause and resume in a cluster: a pause made on one node holds the job on every node.

A pause that held only the node it was made on would not hold anything: the paused node's start
is refused without a claim, so the standby claims the session after its standby_delay and runs
it. The pause, the failure pause (pause_on_failure) and their end live in the cluster ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from market_timers import cli
from market_timers.contracts import exitcodes
from market_timers.ledger import pauses
from market_timers.ledger import postgresql as pg

from .test_cluster_runner import SESSION, node_env, start

CONFIG = """
calendar = "XNYS"
state_dir = "{state}"
unit_dir = "{units}"
spool_dir = "{spool}"
runtime_dir = "{run}"

[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
lock = "orders"

[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
lock = "orders"
orders = true
pause_on_failure = true

[cluster]
node = "{node}"
"""


def node_configs(tmp_path, dsn, monkeypatch, text: str = CONFIG) -> dict:
    """node name -> its config file (`text`, formatted for the node); the operator's CLI reads
    the DSN credential as root would."""
    dsn_file = tmp_path / "operator-dsn"
    dsn_file.write_text(dsn + "\n")
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(dsn_file))
    out = {}
    for node in ("ny4-a", "ny4-b"):
        base = tmp_path / node
        path = tmp_path / f"{node}.toml"
        path.write_text(text.format(state=base / "state", units=base / "units",
                                    spool=base / "spool", run=base / "run", node=node))
        out[node] = path
    return out


@pytest.fixture
def nodes(tmp_path, dsn, monkeypatch):
    return node_configs(tmp_path, dsn, monkeypatch)


def main(config, *args) -> int:
    return cli.main(["--config", str(config), *args])


def test_a_pause_on_one_node_holds_the_job_on_the_other(tmp_path, dsn, nodes, capsys):
    assert main(nodes["ny4-a"], "pause", "closing-orders", "--note", "broker maintenance") == 0
    assert "every node" in capsys.readouterr().out
    marker = tmp_path / "ran"
    standby = start(node_env(tmp_path, dsn, "ny4-b"), f"touch {marker}")
    _, err = standby.communicate(timeout=30)
    assert standby.returncode == exitcodes.PAUSED == 177, err
    assert not marker.exists()
    assert "broker maintenance" in err and "market-timers resume closing-orders" in err
    # resumed on the other node: the session (no claim was taken) runs on the next start
    assert main(nodes["ny4-b"], "resume", "closing-orders") == 0
    standby = start(node_env(tmp_path, dsn, "ny4-b"), f"touch {marker}")
    _, err = standby.communicate(timeout=30)
    assert standby.returncode == 0, err
    assert marker.exists()


def test_a_group_pause_made_on_one_node_is_seen_by_the_other(tmp_path, dsn, nodes, capsys):
    assert main(nodes["ny4-a"], "pause", "--group", "orders", "--until", "2025-12-01",
                "--note", "new API") == 0
    capsys.readouterr()
    # the job's own resume on the other node says what still holds it: the group's pause
    assert main(nodes["ny4-b"], "resume", "signal", "--json") == 0
    still = json.loads(capsys.readouterr().out)["still_paused"]
    assert (still["scope"], still["note"], still["until"], still["host"]) == \
        ("lock group orders", "new API", "2025-12-01", os.uname().nodename)
    proc = start(node_env(tmp_path, dsn, "ny4-b", job="signal"), "true")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.PAUSED, err
    # the status of the other node lists it among the pauses in force
    from market_timers.config.loader import load
    from market_timers.watch.status import collect

    (tmp_path / "ny4-b" / "state").mkdir(parents=True, exist_ok=True)
    (tmp_path / "ny4-b" / "state" / "plan.json").write_text('{"fires": []}')
    doc = collect(load(nodes["ny4-b"]), now=datetime(2025, 11, 26, 12, tzinfo=UTC),
                  systemctl=NoUnits(), calendar_warnings=False)
    assert [p["scope"] for p in doc["pauses"]] == ["lock group orders"]


class NoUnits:
    def show(self, units, properties):
        return {}


def test_a_failure_pause_on_one_node_holds_the_group_on_the_other(tmp_path, dsn, nodes):
    env = dict(node_env(tmp_path, dsn, "ny4-a"), MARKET_PAUSE_ON_FAILURE="1")
    failed = start(env, "exit 3")
    failed.communicate(timeout=30)
    assert failed.returncode == 3
    env.update(SERVICE_RESULT="exit-code", EXIT_CODE="exited", EXIT_STATUS="3")
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record"], env=env, check=True,
                   timeout=30)
    later = node_env(tmp_path, dsn, "ny4-b", job="signal")
    later["MARKET_SESSION"] = "2025-11-28"
    proc = start(later, "true")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.PAUSED, err
    assert "pause_on_failure" in err and "market-timers resume --group orders" in err
    # the operator on the other node resumes the group: the cluster's failure pause ends
    assert main(nodes["ny4-b"], "resume", "--group", "orders") == 0
    proc = start(later, "true")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_a_pause_that_cannot_reach_the_cluster_ledger_is_refused(tmp_path, nodes, monkeypatch,
                                                                  capsys):
    from tests.fakes.pgserver import free_port

    dsn_file = tmp_path / "dead-dsn"
    dsn_file.write_text(f"host=127.0.0.1 port={free_port()} dbname=x user=x connect_timeout=2\n")
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(dsn_file))
    assert main(nodes["ny4-a"], "pause", "signal", "--note", "x") == exitcodes.FAILURE
    err = capsys.readouterr().err
    assert "not paused" in err and "cluster ledger" in err
    # nothing half-done: this node holds no pause of its own either
    assert pauses.paused(str(tmp_path / "ny4-a" / "state"), "signal", "orders", SESSION) is None


def test_the_pause_functions_are_a_node_roles_only_way_in(pgserver, dsn):
    """Least privilege still holds: mt_pauses is reached through the functions only."""
    with pg.connect(dsn) as conn:
        assert "mt_pauses" in pg.TABLES
        names = {row[0] for row in conn.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.proname LIKE 'mt_pause%' "
            "AND p.prosecdef")}
    assert {"mt_pause", "mt_pauses_of", "mt_pause_list"} <= names
