"""The record step's end record (`market-timers-run --record %n`): what the alert handler of the
job units reads instead of OnFailure=/OnSuccess= (contracts/endrecord.py, issue 46)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from market_timers import run as entry
from market_timers.contracts import endrecord

UNIT = "market-signal@2025-11-28-174500.service"
INVOCATION = "0123456789abcdef0123456789abcdef"


def step_env(tmp_path, **extra) -> dict:
    (tmp_path / "state").mkdir(exist_ok=True)  # the unit's StateDirectory=
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    env.update(MARKET_JOB="signal", MARKET_SESSION="2025-11-28", MARKET_CALENDAR="XNYS",
               MARKET_EVENT="close", MARKET_GRACE_SEC="60", MARKET_RETRIES="2",
               MARKET_SCHEDULED_UTC=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               MARKET_LOCK_DIR=str(tmp_path / "run"), MARKET_STATE_DIR=str(tmp_path / "state"),
               INVOCATION_ID=INVOCATION, SERVICE_RESULT="exit-code", EXIT_CODE="exited",
               EXIT_STATUS="3")
    env.update(extra)
    return env


def ends(tmp_path) -> list[str]:
    try:
        return sorted(os.listdir(tmp_path / "state" / endrecord.DIR))
    except FileNotFoundError:
        return []


def test_the_record_step_leaves_the_units_end_record_readable_by_the_package_only(tmp_path):
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record", UNIT],
                   env=step_env(tmp_path), check=True, timeout=60)
    assert ends(tmp_path) == [INVOCATION]
    directory = tmp_path / "state" / endrecord.DIR
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / INVOCATION).stat().st_mode) == 0o600
    record = endrecord.read(directory / INVOCATION)
    assert (record.unit, record.invocation, record.result, record.exit_code,
            record.exit_status) == (UNIT, INVOCATION, "exit-code", "exited", "3")
    assert record.context["MARKET_JOB"] == "signal" and record.context["MARKET_RETRIES"] == "2"
    assert not any(k.startswith(("INVOCATION", "PATH")) for k in record.context)


def test_a_unit_that_keeps_its_own_on_failure_leaves_no_record(tmp_path, monkeypatch):
    """`market-timers run`'s and backfill's units pass no name: their OnFailure= tells."""
    monkeypatch.setattr(os, "environ", step_env(tmp_path))
    assert entry.main(["--record"]) == 0
    assert ends(tmp_path) == []


def test_the_record_is_written_even_when_the_ledger_step_breaks(tmp_path, monkeypatch):
    from market_timers.runner import record

    monkeypatch.setattr(os, "environ", step_env(tmp_path))
    monkeypatch.setattr(record, "record", lambda env: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        entry.main(["--record", UNIT])
    assert ends(tmp_path) == [INVOCATION]


def test_the_record_is_the_steps_last_act(tmp_path, monkeypatch):
    """Written after the ledger and the metrics: when the handler reads it, the run ledger
    already holds the run (the handler reads the runner's account of the end from it)."""
    from market_timers import metrics
    from market_timers.ledger import runrecord

    seen = []
    monkeypatch.setattr(os, "environ", step_env(tmp_path, MARKET_SLOT_EVERY_SEC=""))
    monkeypatch.setattr(metrics, "after_run", lambda env: seen.append(ends(tmp_path)))
    entry.main(["--record", UNIT])
    assert seen == [[]] and ends(tmp_path) == [INVOCATION]
    assert runrecord.read(tmp_path / "state", "signal", "2025-11-28") is not None


def test_a_record_that_cannot_be_written_is_warned_and_the_step_still_succeeds(
        tmp_path, monkeypatch, capsys):
    env = step_env(tmp_path)
    (tmp_path / "state" / endrecord.DIR).write_text("not a directory")
    monkeypatch.setattr(os, "environ", env)
    assert entry.main(["--record", UNIT]) == 0
    assert "cannot leave the end record" in capsys.readouterr().err


def test_without_systemds_invocation_id_there_is_no_record(tmp_path):
    env = step_env(tmp_path)
    del env["INVOCATION_ID"]
    assert endrecord.write(tmp_path / "state", UNIT, env) is None
    assert endrecord.write(tmp_path / "state", "ssh.service", step_env(tmp_path)) is None
    assert ends(tmp_path) == []
