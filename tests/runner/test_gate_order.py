"""The order of the runner's gates where two refusals apply to one start: which one wins is part
of the promise (what is alerted, what keeps the session runnable), so each pair the other tests
do not cover is pinned here. Pause and halt records are written as `market-timers pause`/`halt`
leave them (ledger/pauses.py, ledger/halts.py)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.runner.test_runner import RUNNER, context, record, run, ticket

from market_timers.contracts import exitcodes
from market_timers.ledger import format_fields, runrecord

SESSION = "2025-11-28"


def pause(tmp_path: Path, job: str = "signal") -> None:
    controls = tmp_path / "state" / "controls"
    controls.mkdir(parents=True, exist_ok=True, mode=0o755)
    (controls / f"pause-job-{job}").write_text(format_fields(
        {"by": "alice", "since": "2025-11-28T12:00:00Z", "note": "broker maintenance"}))


def halt(tmp_path: Path) -> None:
    controls = tmp_path / "state" / "controls"
    controls.mkdir(parents=True, exist_ok=True, mode=0o755)
    (controls / "halt-all").write_text(format_fields(
        {"scope": "all", "by": "alice", "since": "2025-11-28T12:00:00Z", "host": "h",
         "reason": "runaway orders"}))


def late(tmp_path: Path, **extra) -> dict:
    return context(tmp_path, datetime.now(UTC) - timedelta(hours=2), **extra)


def failed_upstream(tmp_path: Path) -> dict:
    runrecord.update(tmp_path / "state", "upstream", SESSION, host="a", pid=1,
                     started_utc="2025-11-28T20:45:00Z", result="exit-code", exit_status="3")
    return {"MARKET_REQUIRES": "upstream"}


@pytest.fixture
def busy_group(tmp_path):
    """Another job of the lock group `orders` running while the start under test comes."""
    holder = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", "echo up; exec sleep 60"],
                              env=context(tmp_path, MARKET_JOB="other"), stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_already_ran_wins_over_a_pause_and_a_halt(tmp_path):
    assert run(context(tmp_path), "/bin/true").returncode == 0
    pause(tmp_path)
    halt(tmp_path)
    assert run(context(tmp_path), "/bin/true").returncode == exitcodes.ALREADY_RAN


def test_a_pause_wins_over_a_halt_a_stale_start_and_unmet_requires(tmp_path):
    pause(tmp_path)
    halt(tmp_path)
    proc = run(late(tmp_path, **failed_upstream(tmp_path)), "/bin/true")
    assert proc.returncode == exitcodes.PAUSED, proc.stderr
    assert record(tmp_path)["refused"] == "paused"


def test_the_operators_run_is_not_paused_but_is_halted(tmp_path):
    pause(tmp_path)
    operator = late(tmp_path, **ticket(tmp_path, "o1", force=False))
    assert run(operator, "/bin/true").returncode == 0
    halt(tmp_path)
    forced = late(tmp_path, **ticket(tmp_path, "o2", force=True))
    assert run(forced, "/bin/true").returncode == exitcodes.HALTED


def test_a_halt_wins_over_unmet_requires_and_a_busy_lock_group(tmp_path, busy_group):
    halt(tmp_path)
    proc = run(context(tmp_path, **failed_upstream(tmp_path)), "/bin/true")
    assert proc.returncode == exitcodes.HALTED, proc.stderr
    assert record(tmp_path)["refused"] == "halted"


def test_a_stale_start_wins_over_a_busy_lock_group(tmp_path, busy_group):
    proc = run(late(tmp_path), "/bin/true")
    assert proc.returncode == exitcodes.STALE_START, proc.stderr
    assert record(tmp_path)["refused"] == "stale-start"


def test_unmet_requires_win_over_a_busy_lock_group(tmp_path, busy_group):
    proc = run(context(tmp_path, **failed_upstream(tmp_path)), "/bin/true")
    assert proc.returncode == exitcodes.REQUIRES_UNMET, proc.stderr
    assert record(tmp_path)["refused"] == "requires-unmet"


def test_a_program_that_cannot_run_is_told_before_a_busy_lock_group(tmp_path, busy_group):
    missing = str(tmp_path / "missing")
    proc = run(context(tmp_path), missing)
    assert proc.returncode == exitcodes.RUNNER_ERROR, proc.stderr
    assert f"cannot run {missing}: not an executable file" in proc.stderr
    assert "busy" not in proc.stderr


def test_a_forced_start_skips_already_ran_and_requires_but_says_so(tmp_path):
    env = failed_upstream(tmp_path)
    assert run(context(tmp_path), "/bin/true").returncode == 0
    forced = context(tmp_path, **env, **ticket(tmp_path, "f1", force=True))
    proc = run(forced, "/bin/true")
    assert proc.returncode == 0, proc.stderr
    assert "starts with --force: its requires (upstream) are not checked" in proc.stderr
