"""A node whose clock disagrees with the cluster ledger's does not run a job (issue 23, "a clock
step on one node"): the claim carries the node's clock reading and the ledger refuses it, in the
same statement, when it is more than [cluster] max_clock_skew_ms off the server's
clock_timestamp(); the runner then exits 179 (a critical alert: "this node's clock is X s
behind/ahead of the cluster ledger's") with no claim taken, so the node whose clock is right
claims and runs the session at its standby delay.

The runner's clock is shifted with tests/fakes/clockshift.c, an LD_PRELOAD shim of this project
(CPython's time.time() and datetime.now() go through libc's clock_gettime, which it replaces)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tests.cluster.test_cluster_runner import SESSION, node_env, start
from tests.fakes.clockshift import build as build_clockshift

from market_timers.contracts import exitcodes
from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg

KEY = Key("closing-orders", SESSION)


@pytest.fixture(scope="session")
def clockshift(tmp_path_factory) -> Path:
    return build_clockshift(tmp_path_factory.mktemp("clockshift") / "clockshift.so")


def shifted(env: dict, shim: Path, ms: int) -> dict:
    return dict(env, LD_PRELOAD=str(shim), MT_CLOCK_SHIFT_MS=str(ms))


def test_the_shim_shifts_the_runners_clock(clockshift):
    """What the runner reads: time.time() and datetime.now() (and `date` in a job)."""
    code = "import time, datetime; print(time.time(), datetime.datetime.now().timestamp())"
    env = {"LD_PRELOAD": str(clockshift), "MT_CLOCK_SHIFT_MS": "-30000", "PATH": "/usr/bin:/bin"}
    before = time.time()
    out = subprocess.run(["python3", "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    for value in out:
        assert -31 < float(value) - before < -29
    date = subprocess.run(["date", "+%s"], env=dict(env, MT_CLOCK_SHIFT_MS="60000"),
                          capture_output=True, text=True, check=True).stdout
    assert 59 <= int(date) - int(before) <= 62


@pytest.mark.parametrize("ms, says", [(30000, "30.0 s ahead of"), (-30000, "30.0 s behind")])
def test_a_node_whose_clock_is_off_refuses_and_takes_no_claim(tmp_path, dsn, clockshift, ms,
                                                              says):
    log = tmp_path / "orders.log"
    env = shifted(node_env(tmp_path, dsn, "ny4-a"), clockshift, ms)
    env["MARKET_GRACE_SEC"] = "120"  # so that the +30 s node is not merely a stale start
    proc = start(env, f"echo ran >> {log}")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.CLOCK_SKEW == 179, err
    assert f"this node's clock is {says} the cluster ledger's" in err, err
    assert "max_clock_skew_ms = 1000" in err, err
    assert not log.exists()
    ledger = pg.PostgresLedger(dsn, "x")
    assert ledger.holder(KEY) is None  # no claim: the session is still runnable once
    (refusal,) = ledger.refusals(KEY)
    assert refusal["refused"] == "clock-skew" and refusal["node"] == "ny4-a"
    assert abs(int(refusal["clock_skew_ms"]) + ms) < 1000  # the ledger's clock minus the node's
    (node,) = ledger.nodes()
    assert node["node"] == "ny4-a" and abs(int(node["clock_skew_ms"]) + ms) < 1000
    ledger.close()


def test_a_node_within_the_bound_claims_as_before(tmp_path, dsn, clockshift):
    log = tmp_path / "orders.log"
    env = shifted(node_env(tmp_path, dsn, "ny4-a"), clockshift, -300)
    proc = start(env, f"echo ran >> {log}")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert log.read_text() == "ran\n"
    ledger = pg.PostgresLedger(dsn, "x")
    assert ledger.holder(KEY)["node"] == "ny4-a"
    (node,) = ledger.nodes()
    assert 0 < int(node["clock_skew_ms"]) < 1000  # about +300: the node is 0.3 s behind
    ledger.close()


def test_a_tighter_bound_refuses_a_smaller_skew(tmp_path, dsn, clockshift):
    env = shifted(node_env(tmp_path, dsn, "ny4-a"), clockshift, 700)
    env["MARKET_MAX_CLOCK_SKEW_MS"] = "250"
    proc = start(env, "true")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.CLOCK_SKEW, err
    assert "0.7 s ahead of the cluster ledger's" in err and "max_clock_skew_ms = 250" in err


def test_the_preferred_node_behind_refuses_and_the_standby_runs_the_session_once(
        tmp_path, dsn, clockshift):
    """Node a (preferred) is 30 s behind, b (standby, 2 s) is right: a refuses with no claim,
    b claims at its standby delay and runs it; one run for the session."""
    log = tmp_path / "orders.log"
    job = f'echo "$MARKET_NODE" >> {log}'
    standby = start(node_env(tmp_path, dsn, "ny4-b", delay=2), job)
    preferred = start(shifted(node_env(tmp_path, dsn, "ny4-a"), clockshift, -30000), job)
    _, a_err = preferred.communicate(timeout=30)
    _, b_err = standby.communicate(timeout=30)
    assert preferred.returncode == exitcodes.CLOCK_SKEW, a_err
    assert standby.returncode == 0, b_err
    assert log.read_text() == "ny4-b\n"
    ledger = pg.PostgresLedger(dsn, "x")
    assert [r["node"] for r in ledger.attempts(KEY)] == ["ny4-b"]
    ledger.close()


def test_a_claim_slow_to_reach_the_ledger_is_not_taken_for_a_slow_clock(dsn):
    """The claim's clock reading arrives late when the statement was held up on its way (a
    stall): the answer's round trip shows the clock is right, so the claim is sent again with a
    new reading rather than refused as a clock 'behind'."""
    ledger = pg.PostgresLedger(dsn, "ny4-a")
    ledger.deadline = time.time() + 30
    sent = []

    def late_reading() -> float:  # the first reading is 5 s old when it reaches the server
        sent.append(1)
        return time.time() - (5 if len(sent) == 1 else 0)

    ledger.clock = late_reading
    real_execute = ledger.conn.execute

    def slow_execute(sql, *params, **kw):
        if "mt_claim" in sql and len(sent) == 1:
            time.sleep(1.5)  # the round trip of the held-up statement
        return real_execute(sql, *params, **kw)

    ledger.conn.execute = slow_execute
    claim = ledger.claim(KEY, "timer", {"invocation": "inv-a"})
    assert claim.ok and len(sent) == 2
    ledger.close()


def test_cluster_init_migrates_a_version_4_ledger_and_an_older_runner_still_claims(
        pgserver, dsn):
    """Version 5 adds the clock check (a new mt_claim signature and mt_nodes' skew columns);
    the version-4 signature is kept, so a node not yet upgraded still claims during a rolling
    upgrade. Idempotent."""
    with pg.connect(pgserver.dsn) as conn:
        conn.execute("DROP FUNCTION IF EXISTS mt_claim(text, text, text, integer, text, text, "
                     "text, text, text, double precision, integer)")
        conn.execute("ALTER TABLE mt_nodes DROP COLUMN IF EXISTS clock_skew_ms, "
                     "DROP COLUMN IF EXISTS clock_checked_at")
        conn.execute("UPDATE mt_schema SET version = 4")
        before, after = pg.init_schema(conn)
        assert (before, after) == (4, pg.SCHEMA_VERSION) and pg.SCHEMA_VERSION >= 5
        assert pg.init_schema(conn) == (pg.SCHEMA_VERSION, pg.SCHEMA_VERSION)
        # a version-4 runner's claim: the old signature, no clock reading
        assert conn.execute("SELECT mt_claim($1, $2, '', 1, 'timer', 'ny4-b', 'i', '', 'w')",
                            KEY.job, KEY.session)[0][0] is not None
    ledger = pg.PostgresLedger(dsn, "ny4-a")
    assert ledger.holder(KEY)["node"] == "ny4-b"
    assert ledger.claim(Key("opening-orders", SESSION), "timer", {}).ok
    ledger.close()


def test_exit_179_is_a_critical_clock_skew_alert_and_never_retried():
    from market_timers.config.alerts import DEFAULT_KIND_SEVERITY
    from market_timers.config.retries import REFUSALS
    from market_timers.contracts import outcomes

    assert outcomes.classify("exit-code", "exited", "179") == "clock-skew"
    assert "clock-skew" in outcomes.FAILURE_KINDS
    assert DEFAULT_KIND_SEVERITY["clock-skew"] == "critical"
    assert outcomes.result_text("exit-code", "179") == "clock skew (exit 179)"
    assert "179" in REFUSALS.split()


def test_cluster_status_shows_each_nodes_last_measured_skew(tmp_path, dsn, clockshift, capsys):
    import json

    from market_timers.cli import cluster

    proc = start(shifted(node_env(tmp_path, dsn, "ny4-a"), clockshift, -30000), "true")
    assert proc.wait(timeout=30) == exitcodes.CLOCK_SKEW
    proc = start(node_env(tmp_path, dsn, "ny4-b", job="report", group="report"), "true")
    assert proc.wait(timeout=30) == 0
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(dsn)
    assert cluster.status(None, str(dsn_file), True) == 0
    nodes = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert 29000 < nodes["ny4-a"]["clock_skew_ms"] < 31000
    assert abs(nodes["ny4-b"]["clock_skew_ms"]) < 1000
    assert cluster.status(None, str(dsn_file), False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "CLOCK" in lines[0]
    (a,) = [line for line in lines if line.startswith("ny4-a ")]
    assert "30.0 s behind" in a, a
