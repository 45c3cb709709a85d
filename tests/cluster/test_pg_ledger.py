"""The PostgreSQL run ledger against a real PostgreSQL server on loopback."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest
from tests.fakes.pgserver import free_port

from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg
from market_timers.ledger.libpq import Unreachable

KEY = Key("closing-orders", "2025-11-26")


def _ledger(dsn, node="ny4-a"):
    return pg.PostgresLedger(dsn, node)


def test_init_schema_is_idempotent_and_versioned(dsn):
    with pg.connect(dsn) as conn:
        assert pg.init_schema(conn) == (pg.SCHEMA_VERSION, pg.SCHEMA_VERSION)
        assert pg.schema_version(conn) == pg.SCHEMA_VERSION


def test_init_schema_refuses_a_newer_schema(dsn):
    with pg.connect(dsn) as conn:
        conn.execute("UPDATE mt_schema SET version = 999")
        try:
            with pytest.raises(pg.DatabaseError, match="newer"):
                pg.init_schema(conn)
        finally:
            conn.execute("UPDATE mt_schema SET version = $1", pg.SCHEMA_VERSION)


def test_first_claim_wins_and_the_second_names_the_holder(dsn):
    a, b = _ledger(dsn, "ny4-a"), _ledger(dsn, "ny4-b")
    first = a.claim(KEY, "timer", {"pid": 11, "started_utc": "2025-11-26T20:50:00.001Z"})
    second = b.claim(KEY, "timer", {"pid": 22})
    assert first.ok and first.attempt == 1 and first.fence
    assert not second.ok
    assert second.holder["node"] == "ny4-a" and second.holder["pid"] == 11
    assert b.holder(KEY)["started_utc"] == "2025-11-26T20:50:00.001Z"


def _race(dsn: str, node: str, barrier, results) -> None:
    ledger = _ledger(dsn, node)
    assert ledger.conn is not None  # connect before the barrier: the race is the claim, not the connection
    barrier.wait()
    results.put((node, ledger.claim(KEY, "timer", {"pid": os.getpid()}).ok))


def test_many_processes_racing_for_one_claim_exactly_one_wins(dsn):
    ctx = multiprocessing.get_context("fork")
    n = 24
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(dsn, f"node-{i}", barrier, results))
             for i in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    winners = [node for node, ok in outcomes if ok]
    assert len(winners) == 1
    assert _ledger(dsn).holder(KEY)["node"] == winners[0]
    assert len(_ledger(dsn).attempts(KEY)) == 1


def test_forced_and_retry_attempts_are_counted_not_refused(dsn):
    ledger = _ledger(dsn)
    assert ledger.claim(KEY, "timer", {"invocation": "inv1"}).attempt == 1
    assert not ledger.claim(KEY, "retry", {}).ok  # attempt 1 has not finished
    ledger.finish(KEY, "inv1", {"result": "exit-code", "exit_status": "1"})
    retry = ledger.claim(KEY, "retry", {"invocation": "inv2"})
    assert retry.ok and retry.attempt == 2
    ledger.finish(KEY, "inv2", {"result": "success", "exit_status": "0"})
    assert not ledger.claim(KEY, "retry", {}).ok  # the last attempt succeeded
    forced = ledger.claim(KEY, "forced", {"invocation": "inv3"})
    assert forced.ok and forced.attempt == 3
    results = [a.get("result") for a in ledger.attempts(KEY)]
    assert results == ["exit-code", "success", None]


def test_refusals_and_finish_of_a_refused_start(dsn):
    ledger = _ledger(dsn)
    ledger.refuse(KEY, {"refused": "stale-start", "invocation": "inv9"})
    ledger.finish(KEY, "inv9", {"result": "exit-code", "exit_status": "170"})
    (refusal,) = ledger.refusals(KEY)
    assert refusal["refused"] == "stale-start" and refusal["exit_status"] == "170"
    assert ledger.holder(KEY) is None
    assert KEY in ledger.keys()


def test_ticket_is_used_once_and_only_for_its_key(dsn):
    ledger = _ledger(dsn)
    ledger.write_ticket("n1", {"job": KEY.job, "session": KEY.session, "force": "yes"})
    assert ledger.take_ticket("n1", Key("other", KEY.session)) is None
    assert ledger.take_ticket("n1", KEY)["force"] == "yes"
    assert ledger.take_ticket("n1", KEY) is None


HOLD = """
import os, sys
from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg
ledger = pg.PostgresLedger(sys.argv[1], sys.argv[2])
got = ledger.lock_group("orders", Key("closing-orders", "2025-11-26"))
if got is None:
    print("busy", flush=True)
    sys.exit(171)
fd, fence = got
os.set_inheritable(fd, True)
print(f"fence {fence}", flush=True)
os.execvp("sleep", ["sleep", "300"])   # the job: the lock lives as long as it does
"""


def _hold(dsn: str, node: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, dsn, node], stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline().strip()
    return proc, line


def test_lock_group_is_cluster_wide_and_dies_with_the_job(dsn):
    holder, line = _hold(dsn, "ny4-a")
    try:
        assert line.startswith("fence ")
        fence = line.split()[1]
        other, busy = _hold(dsn, "ny4-b")
        other.wait(30)
        assert busy == "busy" and other.returncode == 171
        checker = _ledger(dsn, "ny4-a")
        assert checker.check_fence("orders", fence)
        assert checker.lock_holder("orders")["node"] == "ny4-a"
    finally:
        holder.kill()  # SIGKILL of the job: the kernel closes the inherited socket
        holder.wait()
    deadline = time.monotonic() + pg.HOLDER_DEATH_BOUND_SEC
    while checker.check_fence("orders", fence) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not checker.check_fence("orders", fence), "a dead holder's fence is still valid"
    successor, line = _hold(dsn, "ny4-b")
    try:
        assert line.startswith("fence ")
        new = line.split()[1]
        assert int(new) > int(fence)
        assert checker.check_fence("orders", new)
        assert not checker.check_fence("orders", fence)  # superseded, forever
    finally:
        successor.kill()
        successor.wait()


def test_a_miss_is_reported_by_one_node_only(dsn):
    a, b = _ledger(dsn, "ny4-a"), _ledger(dsn, "ny4-b")
    assert a.note_miss(KEY) is True
    assert b.note_miss(KEY) is False
    assert a.note_miss(KEY) is False


def test_multi_host_dsn_skips_a_down_first_host(dsn, pgserver):
    down = free_port()
    multi = (f"host=127.0.0.1,127.0.0.1 port={down},{pgserver.port} dbname=mt user=mt "
             f"password={dsn.split('password=')[1]} target_session_attrs=read-write")
    ledger = _ledger(multi)
    assert ledger.claim(KEY, "timer", {}).ok


def test_unreachable_database_raises_unreachable_without_the_password(pgserver):
    dsn = f"host=127.0.0.1 port={free_port()} dbname=mt user=mt password=s3cret-pw"
    with pytest.raises(Unreachable) as err:
        _ledger(dsn).holder(KEY)
    assert "s3cret-pw" not in str(err.value)


def test_nodes_are_seen_and_runs_listed(dsn):
    ledger = _ledger(dsn, "ny4-a")
    ledger.claim(KEY, "timer", {})
    assert [n["node"] for n in ledger.nodes()] == ["ny4-a"]
    (run,) = ledger.runs()
    assert (run["job"], run["session"], run["node"], run["attempt"]) == (
        KEY.job, KEY.session, "ny4-a", "1")


def test_session_settings_arrive_in_the_startup_packet_or_by_set(dsn):
    with pg.connect(dsn) as conn:
        assert conn.execute("SHOW tcp_keepalives_idle")[0][0] == "5"
        assert conn.execute("SHOW statement_timeout")[0][0] == "10s"
    with pg.connect(dsn + " options='-c application_name=x'") as conn:  # the DSN's own options
        assert conn.execute("SHOW tcp_user_timeout")[0][0] == "10000"
    uri = "postgresql://mt:{pw}@127.0.0.1:{port}/mt".format(
        pw=dsn.split("password=")[1], port=dsn.split("port=")[1].split()[0])
    with pg.connect(uri) as conn:
        assert conn.execute("SHOW lock_timeout")[0][0] == "5s"
