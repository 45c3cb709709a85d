"""The runner on the cluster ledger: one run per (job, session) across nodes, standby delay,
cluster-wide lock groups with fencing, and what a node does when PostgreSQL is unreachable."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.fakes.pgserver import free_port

from market_timers.contracts import exitcodes
from market_timers.ledger import Key
from market_timers.ledger import postgresql as pg

RUNNER = [sys.executable, "-m", "market_timers.run"]
SESSION = "2025-11-26"


def node_env(tmp_path: Path, dsn: str, node: str, delay: int = 0, job: str = "closing-orders",
             group: str = "orders", mode: str = "skip") -> dict:
    dsn_file = tmp_path / f"dsn-{node}"
    dsn_file.write_text(dsn + "\n")
    env = dict(os.environ)
    env.pop("JOURNAL_STREAM", None)
    env.update(MARKET_JOB=job, MARKET_SESSION=SESSION, MARKET_GRACE_SEC="60",
               MARKET_SCHEDULED_UTC=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               MARKET_LOCK_GROUP=group, MARKET_LOCK_DIR=str(tmp_path / node / "run"),
               MARKET_STATE_DIR=str(tmp_path / node / "state"), MARKET_LEDGER="postgresql",
               MARKET_NODE=node, MARKET_STANDBY_DELAY_SEC=str(delay),
               MARKET_ON_DB_UNREACHABLE=mode, MARKET_CLUSTER_DSN_FILE=str(dsn_file),
               INVOCATION_ID=f"inv-{node}-{job}")
    return env


def start(env: dict, script: str) -> subprocess.Popen:
    return subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", script], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_nodes_one_run_and_the_preferred_node_claims_it(tmp_path, dsn):
    log = tmp_path / "orders.log"
    job = f'echo "$MARKET_NODE fence=$MARKET_FENCE" >> {log}'
    standby = start(node_env(tmp_path, dsn, "ny4-b", delay=2), job)
    primary = start(node_env(tmp_path, dsn, "ny4-a"), job)
    _, primary_err = primary.communicate(timeout=30)
    _, standby_err = standby.communicate(timeout=30)
    assert primary.returncode == 0, primary_err
    assert standby.returncode == exitcodes.ALREADY_RAN == 173, standby_err
    assert "on host ny4-a" in standby_err
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ny4-a fence=")
    holder = pg.PostgresLedger(dsn, "x").holder(Key("closing-orders", SESSION))
    assert holder["node"] == "ny4-a"


def test_the_standby_runs_when_the_preferred_node_does_not(tmp_path, dsn):
    log = tmp_path / "orders.log"
    t0 = time.monotonic()
    standby = start(node_env(tmp_path, dsn, "ny4-b", delay=2), f"echo ran >> {log}")
    _, err = standby.communicate(timeout=30)
    assert standby.returncode == 0, err
    assert time.monotonic() - t0 >= 2  # it gave the preferred node its standby_delay
    assert log.read_text() == "ran\n"
    assert pg.PostgresLedger(dsn, "x").holder(Key("closing-orders", SESSION))["node"] == "ny4-b"


def test_a_pre_fired_standby_claims_at_the_instant_plus_its_delay(tmp_path, dsn):
    """The timer fires `lead` early (pre-fire): the standby's delay counts from the instant."""
    log = tmp_path / "orders.log"
    env = node_env(tmp_path, dsn, "ny4-b", delay=2)
    instant = int(time.time()) + 2
    env.update(MARKET_SCHEDULED_UTC=datetime.fromtimestamp(instant, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), MARKET_LEAD_SEC="2")
    standby = start(env, f"date +%s.%N >> {log}")
    _, err = standby.communicate(timeout=30)
    assert standby.returncode == 0, err
    assert float(log.read_text()) >= instant + 2  # not at the instant: the delay was given


def test_a_lock_group_is_busy_across_nodes_and_the_fence_is_handed_over(tmp_path, dsn):
    first = start(node_env(tmp_path, dsn, "ny4-a", job="closing-orders"),
                  'echo "fence $MARKET_FENCE"; exec sleep 30')
    try:
        fence = first.stdout.readline().split()[1]
        other = subprocess.run(
            [*RUNNER, "--", "/bin/true"], capture_output=True, text=True, timeout=30,
            env=node_env(tmp_path, dsn, "ny4-b", job="opening-orders"))
        assert other.returncode == exitcodes.OVERLAP_SKIPPED == 171, other.stderr
        assert "busy on node ny4-a" in other.stderr
        ledger = pg.PostgresLedger(dsn, "x")
        assert ledger.check_fence("orders", fence)
    finally:
        first.kill()  # the job dies: its inherited connection closes, the lock is free
        first.wait()
    deadline = time.monotonic() + pg.HOLDER_DEATH_BOUND_SEC
    while ledger.check_fence("orders", fence) and time.monotonic() < deadline:
        time.sleep(0.1)
    later = subprocess.run(
        [*RUNNER, "--", "/bin/sh", "-c", 'echo "$MARKET_FENCE"'], capture_output=True,
        text=True, timeout=30, env=node_env(tmp_path, dsn, "ny4-b", job="reconcile"))
    assert later.returncode == 0, later.stderr
    assert int(later.stdout.strip()) > int(fence)
    assert not ledger.check_fence("orders", fence)


def test_database_unreachable_skip_does_not_run_and_exits_175(tmp_path):
    down = f"host=127.0.0.1 port={free_port()} dbname=mt user=mt password=pw"
    marker = tmp_path / "ran"
    proc = subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)], capture_output=True,
                          text=True, timeout=30, env=node_env(tmp_path, down, "ny4-a"))
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE == 175
    assert not marker.exists()
    assert "on_db_unreachable = skip" in proc.stderr and "password=pw" not in proc.stderr


def test_database_unreachable_run_runs_it_locally_and_says_so(tmp_path):
    down = f"host=127.0.0.1 port={free_port()} dbname=mt user=mt password=pw"
    marker = tmp_path / "ran"
    env = node_env(tmp_path, down, "ny4-a", mode="run")
    proc = subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)], capture_output=True,
                          text=True, timeout=30, env=env)
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    assert "another node may run it too" in proc.stderr
    again = subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)], capture_output=True,
                           text=True, timeout=30, env=dict(env, INVOCATION_ID="inv-second"))
    assert again.returncode == exitcodes.ALREADY_RAN  # the local ledger still holds it once
    env.update(SERVICE_RESULT="success", EXIT_CODE="exited", EXIT_STATUS="0")
    subprocess.run([*RUNNER, "--record"], env=env, timeout=30, check=True)
    from market_timers.ledger.local import LocalLedger

    (attempt,) = LocalLedger(env["MARKET_STATE_DIR"]).attempts(Key("closing-orders", SESSION))
    assert attempt["result"] == "success"


def test_a_missing_dsn_credential_is_unreachable_not_a_crash(tmp_path, dsn):
    env = node_env(tmp_path, dsn, "ny4-a")
    env["MARKET_CLUSTER_DSN_FILE"] = str(tmp_path / "nope")
    proc = subprocess.run([*RUNNER, "--", "/bin/true"], capture_output=True, text=True,
                          timeout=30, env=env)
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE
    assert "cluster DSN credential" in proc.stderr


def test_record_finishes_the_cluster_attempt(tmp_path, dsn):
    env = node_env(tmp_path, dsn, "ny4-a")
    assert subprocess.run([*RUNNER, "--", "/bin/false"], env=env, timeout=30).returncode == 1
    env.update(SERVICE_RESULT="exit-code", EXIT_CODE="exited", EXIT_STATUS="1")
    subprocess.run([*RUNNER, "--record"], env=env, timeout=30, check=True)
    (attempt,) = pg.PostgresLedger(dsn, "x").attempts(Key("closing-orders", SESSION))
    assert attempt["result"] == "exit-code" and attempt["exit_status"] == "1"


def _periodic(env: dict) -> dict:
    """A periodic job's context: a slot every 60 s, the current one just started."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    first = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    last = datetime.fromtimestamp(now.timestamp() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = dict(env, MARKET_SLOT_EVERY_SEC="60", MARKET_SLOT_FIRST_UTC=first,
               MARKET_SLOT_LAST_UTC=last, MARKET_SESSION=now.date().isoformat(),
               MARKET_GRACE_SEC="3600")
    env.pop("MARKET_SCHEDULED_UTC", None)
    return env


def test_a_periodic_slot_with_the_database_unreachable_is_skipped_or_run_as_configured(tmp_path):
    down = f"host=127.0.0.1 port={free_port()} dbname=mt user=mt password=pw"
    marker = tmp_path / "ran"
    skip = subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)], capture_output=True,
                          text=True, timeout=30,
                          env=_periodic(node_env(tmp_path, down, "ny4-a", job="cycle")))
    assert skip.returncode == exitcodes.LEDGER_UNREACHABLE, skip.stderr
    assert not marker.exists() and "Traceback" not in skip.stderr
    run = subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)], capture_output=True,
                         text=True, timeout=30,
                         env=_periodic(node_env(tmp_path, down, "ny4-a", job="cycle",
                                                mode="run")))
    assert run.returncode == 0, run.stderr
    assert marker.exists() and "another node may run it too" in run.stderr


def test_a_periodic_slot_honours_the_cluster_wide_lock_group(tmp_path, dsn):
    """A periodic job shares its lock group with one-shot jobs on the other nodes: while
    closing-orders runs on ny4-a, a slot of `cycle` (same group) on ny4-b is skipped, not run
    beside it; once the group is free the next start runs with a newer fence."""
    first = start(node_env(tmp_path, dsn, "ny4-a", job="closing-orders"),
                  'echo "fence $MARKET_FENCE"; exec sleep 30')
    marker = tmp_path / "cycle-ran"
    try:
        fence = first.stdout.readline().split()[1]
        slot = subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)],
                              capture_output=True, text=True, timeout=30,
                              env=_periodic(node_env(tmp_path, dsn, "ny4-b", job="cycle")))
        assert slot.returncode == exitcodes.OVERLAP_SKIPPED == 171, slot.stderr
        assert not marker.exists()
        assert "busy on node ny4-a" in slot.stderr
    finally:
        first.kill()
        first.wait()
    ledger = pg.PostgresLedger(dsn, "x")
    deadline = time.monotonic() + pg.HOLDER_DEATH_BOUND_SEC
    while ledger.check_fence("orders", fence) and time.monotonic() < deadline:
        time.sleep(0.1)
    env = _periodic(node_env(tmp_path, dsn, "ny4-b", job="cycle"))
    env["INVOCATION_ID"] = "inv-cycle-2"
    # the skipped slot's claim was never taken: the same slot may run once the group is free
    later = subprocess.run([*RUNNER, "--", "/bin/sh", "-c", 'echo "$MARKET_FENCE"'],
                           capture_output=True, text=True, timeout=30, env=env)
    assert later.returncode == 0, later.stderr
    assert int(later.stdout.strip()) > int(fence)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_the_job_dies_with_its_runner_so_the_lock_group_never_outlives_the_run(tmp_path, dsn):
    """The supervisor holds the lock group's connection, not the job (issue 23, 3): when the
    supervisor is killed -9 the job is killed too (setpriv --pdeathsig), so the group, released
    with the supervisor's socket, is never free while its job still runs."""
    env = dict(node_env(tmp_path, dsn, "ny4-a"), MARKET_JOB_USER="nobody")
    runner = start(env, "echo $$; exec sleep 60")
    job = int(runner.stdout.readline())
    assert _alive(job)
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 10
    while _alive(job) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(job)
    later = subprocess.run([*RUNNER, "--", "/bin/true"], capture_output=True, text=True,
                           timeout=30, env=node_env(tmp_path, dsn, "ny4-b", job="reconcile"))
    assert later.returncode == 0, later.stderr  # the group is free: nothing of the run is left


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_a_job_as_its_own_user_asks_its_supervisor_whether_its_fence_holds(tmp_path, dsn):
    """The job runs as another user with neither the DSN (its file is the runner's only) nor a
    database session: `market-timers fence check` asks the supervisor, which holds the group's
    connection. While the run holds the group: exit 0; once another node has taken the group
    over (the supervisor's backend ended, as a vanished host's would be): superseded, exit 1."""
    check = f"{sys.executable} -m market_timers fence check"
    script = (f"echo fence $MARKET_FENCE fd=$MARKET_FENCE_FD; {check}; echo first=$?; "
              f"read go; {check}; echo second=$?")
    env = dict(node_env(tmp_path, dsn, "ny4-a"), MARKET_JOB_USER="nobody")
    env["PYTHONPATH"] = str(Path(pg.__file__).resolve().parents[2])
    runner = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", script], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        fence = runner.stdout.readline().split()[1]
        assert runner.stdout.readline().strip() == f"fence {fence} holds lock group orders"
        assert runner.stdout.readline().strip() == "first=0"
        ledger = pg.PostgresLedger(dsn, "admin")
        ledger.conn.execute("SELECT pg_terminate_backend(backend_pid) FROM mt_locks "
                            "WHERE grp = 'orders'")  # the run's lock session is gone
        other = subprocess.run([*RUNNER, "--", "/bin/true"], capture_output=True, text=True,
                               timeout=30, env=node_env(tmp_path, dsn, "ny4-b", job="reconcile"))
        assert other.returncode == 0, other.stderr  # ny4-b took the group over
        runner.stdin.write("go\n")
        runner.stdin.flush()
        out, err = runner.communicate(timeout=30)
    finally:
        runner.kill()
    assert "second=1" in out, (out, err)
    assert f"fence {fence} is superseded: lock group orders is held by node ny4-b" in err \
        or "cannot reach the ledger" in err, err


def test_the_record_step_finishes_the_run_when_its_credentials_are_gone(tmp_path, dsn):
    """systemd 252 does not reliably give ExecStopPost= the unit's credentials (under
    ProtectSystem=strict with ReadWritePaths=, /run/credentials/<unit> is unreadable there): the
    start hands the DSN to its own record step, which finishes the run in the cluster ledger and
    removes it; the job (another user) never sees it."""
    env = dict(node_env(tmp_path, dsn, "ny4-a"), INVOCATION_ID=os.urandom(16).hex())
    proc = start(env, "true")
    assert proc.wait(timeout=30) == 0
    hand_off = tmp_path / "ny4-a" / "run" / pg.HAND_OFF_DIR / env["INVOCATION_ID"]
    assert hand_off.read_text() == dsn and hand_off.stat().st_mode & 0o777 == 0o600
    assert hand_off.parent.stat().st_mode & 0o777 == 0o700
    record = dict(env, MARKET_CLUSTER_DSN_FILE=str(tmp_path / "gone" / "dsn"),
                  SERVICE_RESULT="success", EXIT_CODE="exited", EXIT_STATUS="0")
    subprocess.run([*RUNNER, "--record"], env=record, check=True, timeout=30)
    attempt = pg.PostgresLedger(dsn, "x").attempts(Key("closing-orders", SESSION))[0]
    assert attempt["result"] == "success"
    assert not hand_off.exists()
