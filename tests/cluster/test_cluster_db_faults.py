"""The runner on the cluster ledger under database faults: a busy database is not an unreachable
one (a lock or statement timeout is retried until the start's deadline, then refused as stale,
never run locally), and every database step of a start is bounded by instant + grace."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta

from tests.cluster.test_cluster_runner import RUNNER, SESSION, node_env
from tests.fakes.stallproxy import StallProxy

from market_timers.contracts import exitcodes
from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg


def _start(env: dict, log) -> subprocess.Popen:
    return subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", f'echo "$MARKET_NODE" >> {log}'],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_table_lock_shorter_than_the_grace_delays_the_claim_and_one_node_runs(
        tmp_path, dsn, pgserver):
    """An admin holds ACCESS EXCLUSIVE on mt_runs for 6 s (past the 5 s lock_timeout) while both
    nodes start: the lock timeout is retried, not taken for an unreachable database, so the node
    with on_db_unreachable = "run" does not run the job locally beside the other one."""
    log = tmp_path / "orders.log"
    admin = pgserver.hold_table_lock("mt_runs", 6)
    try:
        a = _start(node_env(tmp_path, dsn, "ny4-a", mode="run"), log)
        b = _start(node_env(tmp_path, dsn, "ny4-b", mode="skip"), log)
        _, a_err = a.communicate(timeout=60)
        _, b_err = b.communicate(timeout=60)
    finally:
        admin.wait(timeout=60)
    # the other node finds the session claimed (173) or, racing it, its lock group busy (171)
    codes = sorted([a.returncode, b.returncode])
    assert codes[0] == 0 and codes[1] in (exitcodes.OVERLAP_SKIPPED, exitcodes.ALREADY_RAN), \
        a_err + b_err
    assert len(log.read_text().splitlines()) == 1
    assert "anyway" not in a_err + b_err and "on_db_unreachable" not in a_err + b_err
    holder = pg.PostgresLedger(dsn, "x").holder(Key("closing-orders", SESSION))
    assert holder["node"] == log.read_text().strip()


def test_a_table_lock_past_the_deadline_refuses_the_start_as_stale_on_every_node(
        tmp_path, dsn, pgserver):
    """The lock outlasts instant + grace: each node refuses the start (170, a critical "did not
    run") with the database's reason, whatever on_db_unreachable says; none runs it locally."""
    log = tmp_path / "orders.log"
    admin = pgserver.hold_table_lock("mt_runs", 20)
    try:
        envs = [node_env(tmp_path, dsn, "ny4-a", mode="run"),
                node_env(tmp_path, dsn, "ny4-b", mode="skip")]
        procs = [_start(dict(env, MARKET_GRACE_SEC="9"), log) for env in envs]
        errs = [p.communicate(timeout=60)[1] for p in procs]
        # the statements they gave up on end too (client_connection_check_interval), rather
        # than queue for the table until their lock_timeout
        waiting, until = "1", time.monotonic() + 2.5
        while time.monotonic() < until:
            waiting = pgserver.psql("SELECT count(*) FROM pg_stat_activity WHERE "
                                    "application_name LIKE 'market-timers %' AND "
                                    "wait_event_type = 'Lock'", "mt").strip()
            if waiting == "0":
                break
            time.sleep(0.05)
        assert waiting == "0"
    finally:
        pgserver.end_admin_sessions()
        admin.wait(timeout=30)
    for proc, err in zip(procs, errs, strict=True):
        assert proc.returncode == exitcodes.STALE_START == 170, err
        assert "lock timeout" in err and "stale start" in err, err
        assert "anyway" not in err
    assert not log.exists()



def _stalled_start(tmp_path, dsn, pgserver, trigger: bytes, grace: int = 5):
    proxy = StallProxy(pgserver.port, trigger, stall=25)
    log = tmp_path / "orders.log"
    env = dict(node_env(tmp_path, proxy.dsn(dsn), "ny4-a", mode="run"),
               MARKET_GRACE_SEC=str(grace))
    t0 = time.monotonic()
    try:
        proc = _start(env, log)
        _, err = proc.communicate(timeout=60)
    finally:
        proxy.close()
    return proc, err, time.monotonic() - t0, log, proxy


def test_a_stalled_reply_to_the_first_query_refuses_the_start_within_the_grace(
        tmp_path, dsn, pgserver):
    """The network stalls the server's replies for 25 s once the runner asks about the session
    (after the connection and the grace check): the start is refused as stale when its deadline
    (instant + grace of 5 s) passes, not run 25 s late; and never run locally."""
    proc, err, took, log, proxy = _stalled_start(tmp_path, dsn, pgserver, b"mt_holder(")
    assert proxy.stalled == 1
    assert proc.returncode == exitcodes.STALE_START, err
    assert not log.exists()
    assert "did not answer" in err and "anyway" not in err, err
    assert took < 20  # the outcome came from the deadline, not from the end of the stall


def test_a_claim_whose_answer_stalls_is_refused_and_withdrawn(tmp_path, dsn, pgserver):
    """The claim reaches the server, which commits it, but its answer stalls past the deadline:
    the start is refused (stale), says that its claim was withdrawn, and the session stays
    runnable once: the next start of it runs."""
    proc, err, took, log, proxy = _stalled_start(tmp_path, dsn, pgserver,
                                                 b"mt_claim(")
    assert proxy.stalled == 1
    assert proc.returncode == exitcodes.STALE_START, err
    assert not log.exists() and took < 20
    assert "withdrawn" in err, err
    assert pg.PostgresLedger(dsn, "x").holder(Key("closing-orders", SESSION)) is None


def test_a_claim_that_completes_past_the_grace_is_refused_withdrawn_and_says_so(
        tmp_path, dsn, monkeypatch, capsys):
    """The grace is checked again after the claim: a claim that took until past instant + grace
    (here a ledger call slowed in-process) does not run the job, says why, and is taken back."""
    from market_timers import runner

    original = pg.PostgresLedger.claim

    def slow_claim(self, key, how, fields):
        claim = original(self, key, how, fields)
        time.sleep(3)
        return claim

    monkeypatch.setattr(pg.PostgresLedger, "claim", slow_claim)
    ran = []
    monkeypatch.setattr(runner, "exec_job", lambda *args, **kwargs: ran.append(args) or 0)
    env = dict(node_env(tmp_path, dsn, "ny4-a"), MARKET_GRACE_SEC="2")
    assert runner.run(["/bin/true"], env) == exitcodes.STALE_START
    assert not ran
    err = capsys.readouterr().err
    assert "the claim of closing-orders for session" in err and "completed" in err, err
    assert "the claim was withdrawn" in err
    assert pg.PostgresLedger(dsn, "x").holder(Key("closing-orders", SESSION)) is None


def test_a_late_start_of_a_session_another_node_ran_still_says_already_ran(tmp_path, dsn):
    """The peek at the ledger takes nothing, so the deadline does not cut it: a start long past
    its grace (a Persistent= catch-up after a reboot) of a session that ran says "already ran"
    (173, a warning), and of one that did not, "stale start" (170) for its lateness."""
    log = tmp_path / "orders.log"
    ran = _start(node_env(tmp_path, dsn, "ny4-a"), log)
    assert ran.wait(timeout=30) == 0
    late = {"MARKET_SCHEDULED_UTC": (datetime.now(UTC) - timedelta(minutes=10)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "MARKET_GRACE_SEC": "60"}
    again = _start(dict(node_env(tmp_path, dsn, "ny4-b"), **late), log)
    _, err = again.communicate(timeout=30)
    assert again.returncode == exitcodes.ALREADY_RAN, err
    assert "on host ny4-a" in err
    other = _start(dict(node_env(tmp_path, dsn, "ny4-b", job="opening-orders"), **late), log)
    _, err = other.communicate(timeout=30)
    assert other.returncode == exitcodes.STALE_START, err
    assert "more than its grace of 60 s" in err and "deadline" not in err


def test_a_server_out_of_connection_slots_is_busy_not_unreachable(tmp_path, dsn, pgserver):
    """The server answers but refuses a new session (too many connections, SQLSTATE 53300): it
    was reached, so with on_db_unreachable = "run" the node does not run the job locally beside
    the node that holds the session; it retries, and claims once a slot is free."""
    pgserver.psql("DO $$ BEGIN CREATE ROLE mt_one LOGIN PASSWORD 'one-pw' CONNECTION LIMIT 1; "
                  "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    with pg.connect(dsn) as conn:  # a node role, as `cluster init --node-role mt_one` makes it
        pg.init_schema(conn, ["mt_one"])
    one = dsn.replace("user=mt password=" + dsn.split("password=")[1],
                      "user=mt_one password=one-pw")
    holder = subprocess.Popen(
        ["runuser", "-u", "postgres", "--", "env", "PGPASSWORD=one-pw", "psql", "-h",
         "127.0.0.1", "-p", str(pgserver.port), "-U", "mt_one", "-d", "mt", "-Atc",
         "SELECT pg_sleep(3)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)  # its session is up: the role's only one
    log = tmp_path / "orders.log"
    try:
        proc = _start(node_env(tmp_path, one, "ny4-a", mode="run"), log)
        _, err = proc.communicate(timeout=60)
    finally:
        holder.wait(timeout=30)
    assert proc.returncode == 0, err
    assert "anyway" not in err
    assert pg.PostgresLedger(dsn, "x").holder(Key("closing-orders", SESSION))["node"] == "ny4-a"


def test_a_refused_login_is_not_unreachable_and_never_runs_locally(tmp_path, dsn):
    """The server answers and refuses this node's login (a wrong password after a rotation, a
    pg_hba.conf line missing): the database is up and the other nodes may reach it, so with
    on_db_unreachable = "run" the job is not run on the local ledger beside them."""
    wrong = dsn.replace("password=" + dsn.split("password=")[1].split()[0],
                        "password=rotated-away")
    log = tmp_path / "orders.log"
    proc = _start(node_env(tmp_path, wrong, "ny4-a", mode="run"), log)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE, err
    assert not log.exists(), "the job ran on the local ledger"
    assert "anyway" not in err
    assert "refused" in err and "password authentication failed" in err
    assert "rotated-away" not in err
