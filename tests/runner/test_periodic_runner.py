"""The runner for a periodic job: which slot a start belongs to, grace against that slot, one run
per (job, session, slot), the lock group, and the skipped slots recorded afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_timers.contracts import exitcodes
from market_timers.runner import record, slotaccount, slotclock, slotrecords
from market_timers.runner.slotclock import PeriodicSlots

RUNNER = [sys.executable, "-m", "market_timers.run"]
SESSION = "2026-12-23"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# The slot a start belongs to -----------------------------------------------------------------

NYSE = PeriodicSlots(utc("2026-12-23 14:35"), 60, utc("2026-12-23 20:50"))
HKEX = PeriodicSlots(utc("2026-12-23 01:35"), 60, utc("2026-12-23 07:50"),
                     (utc("2026-12-23 04:00"), utc("2026-12-23 05:00")))


@pytest.mark.parametrize(("schedule", "now", "slot"), [
    (NYSE, "2026-12-23 14:35:00.030", "2026-12-23 14:35"),  # on time
    (NYSE, "2026-12-23 14:36:59.900", "2026-12-23 14:36"),  # the latest slot, not the next
    (NYSE, "2026-12-23 17:12:20", "2026-12-23 17:12"),  # a boot catch-up: its latest slot
    (NYSE, "2026-12-23 14:00:00", "2026-12-23 14:35"),  # before the window: the first
    (NYSE, "2026-12-23 22:00:00", "2026-12-23 20:50"),  # after it: the last
    (HKEX, "2026-12-23 04:00:10", "2026-12-23 04:00"),  # the slot at break_start runs
    (HKEX, "2026-12-23 04:30:00", "2026-12-23 04:00"),  # inside the break: none, the last before
    (HKEX, "2026-12-23 05:00:01", "2026-12-23 05:00"),
])
def test_a_start_belongs_to_the_latest_slot_at_or_before_it(schedule, now, slot):
    assert schedule.current(utc(now)) == utc(slot)


def test_slots_rebuilt_from_the_units_context_match_the_plans_count():
    assert len(NYSE.slots()) == 376
    assert len(HKEX.slots()) == 146 + 171  # 01:35..04:00 and 05:00..07:50
    env = {"MARKET_SLOT_FIRST_UTC": "2026-12-23T01:35:00Z", "MARKET_SLOT_EVERY_SEC": "60",
           "MARKET_SLOT_LAST_UTC": "2026-12-23T07:50:00Z",
           "MARKET_SLOT_PAUSE_UTC": "2026-12-23T04:00:00Z/2026-12-23T05:00:00Z"}
    assert PeriodicSlots.from_env(env).slots() == HKEX.slots()
    assert PeriodicSlots.from_env({}) is None


# The runner ------------------------------------------------------------------------------------

def context(tmp_path: Path, slot_ago: float, every: int = 60, grace: int = 20, **extra) -> dict:
    """A periodic unit's environment whose current slot was `slot_ago` seconds ago."""
    now = datetime.now(UTC)
    current = now - timedelta(seconds=slot_ago)
    first = current - timedelta(seconds=3 * every)
    env = dict(os.environ)
    env.pop("JOURNAL_STREAM", None)
    env.update(MARKET_JOB="cycle", MARKET_SESSION=SESSION, MARKET_CALENDAR="XNYS",
               MARKET_EVENT="every", MARKET_GRACE_SEC=str(grace), MARKET_LOCK_GROUP="orders",
               MARKET_SLOT_FIRST_UTC=slotclock.z(first), MARKET_SLOT_EVERY_SEC=str(every),
               MARKET_SLOT_LAST_UTC=slotclock.z(first + timedelta(seconds=100 * every)),
               MARKET_LOCK_DIR=str(tmp_path / "run"), MARKET_STATE_DIR=str(tmp_path / "state"),
               INVOCATION_ID="0123456789abcdef0123456789abcdef")
    env.update(extra)
    return env


def slot_of(env: dict) -> str:
    return slotclock.z(PeriodicSlots.from_env(env).current(datetime.now(UTC)))


def run(env: dict, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNNER, "--", *command], env=env, capture_output=True, text=True,
                          timeout=30)


def slot_record(tmp_path: Path, slot: str) -> dict:
    name = slot.replace("-", "").replace(":", "")
    return json.loads((tmp_path / "state" / "runs" / "cycle" / SESSION / f"{name}.json")
                      .read_text())


def test_a_start_within_grace_runs_for_its_slot_and_records_that_slot(tmp_path):
    env = context(tmp_path, slot_ago=5.4)
    slot = slot_of(env)
    proc = run(env, "/usr/bin/env")
    assert proc.returncode == 0, proc.stderr
    seen = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert seen["MARKET_SLOT_UTC"] == slot == seen["MARKET_SCHEDULED_UTC"]
    assert seen["MARKET_SESSION"] == SESSION
    rec = slot_record(tmp_path, slot)
    assert (rec["session"], rec["slot"], rec["refused"] if "refused" in rec else None) == (
        SESSION, slot, None)
    assert 5 <= rec["late_sec"] < 7


LOWER = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                           reason="lowering a nice value needs root")
NICE = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]


@LOWER
@pytest.mark.parametrize(("start", "job"), [(-10, 0), (-5, -5), (5, 5)])
def test_a_periodic_job_runs_at_the_nice_value_of_its_unit_without_the_lead(tmp_path, start, job):
    """A periodic unit with a lead has the pre-fire's Nice=-10 but no wait (each slot runs at its
    instant): the job runs at nice 0, or at a drop-in's Nice= (which replaces the -10)."""
    env = context(tmp_path, slot_ago=1, MARKET_LEAD_SEC="2")
    proc = subprocess.run([*RUNNER, "--", *NICE], env=env, capture_output=True, text=True,
                          timeout=30, preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, start))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == job


def test_a_start_later_than_grace_after_its_slot_is_refused_and_not_replayed(tmp_path):
    marker = tmp_path / "ran"
    env = context(tmp_path, slot_ago=35)  # grace 20 s: misfire
    proc = run(env, "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.STALE_START
    assert not marker.exists()
    assert "stale start" in proc.stderr and "not replayed" in proc.stderr
    assert slot_record(tmp_path, slot_of(env))["refused"] == "stale-start"


def test_the_ledger_claims_each_slot_once_a_second_start_is_already_ran_173(tmp_path):
    from market_timers import ledger

    env = context(tmp_path, slot_ago=2)
    assert run(env, "/bin/true").returncode == 0
    marker = tmp_path / "second"
    proc = run(env, "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.ALREADY_RAN == 173
    assert not marker.exists()
    assert "already ran" in proc.stderr
    slot = PeriodicSlots.from_env(env).current(datetime.now(UTC))
    book = ledger.open_ledger(env)
    [attempt] = book.attempts(ledger.Key("cycle", SESSION, slotclock.slot_name(slot)))
    assert attempt["how"] == "timer"
    assert book.holder(ledger.Key("cycle", SESSION, "")) is None  # per slot, not per session
    # another slot of the session is a key of its own: it runs (a slot 62 s ago, the last one)
    other = context(tmp_path, slot_ago=62, grace=70)
    other["MARKET_SLOT_LAST_UTC"] = slotclock.z(datetime.now(UTC) - timedelta(seconds=62))
    assert slot_of(other) != slotclock.z(slot)
    assert run(other, "/bin/true").returncode == 0


def test_another_job_of_the_lock_group_running_skips_the_slot(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-m", "market_timers.run", "--", "/bin/sh", "-c", "echo go; sleep 10"],
        env={**context(tmp_path, 1), "MARKET_JOB": "orders-open", "MARKET_SLOT_EVERY_SEC": "",
             "MARKET_SCHEDULED_UTC": slotclock.z(datetime.now(UTC))},
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "go"
        env = context(tmp_path, slot_ago=3)
        marker = tmp_path / "ran"
        proc = run(env, "/usr/bin/touch", str(marker))
        assert proc.returncode == exitcodes.OVERLAP_SKIPPED
        assert not marker.exists()
        assert "job orders-open" in proc.stderr
        assert slot_record(tmp_path, slot_of(env))["refused"] == "overlap-skipped"
    finally:
        holder.kill()
        holder.wait()


def started_record(state: Path, slot: datetime, started: datetime, invocation: str = "") -> str:
    """A slot's record as the runner writes it, with the pointer ExecStopPost= follows."""
    key = slotclock.record_key(SESSION, slot)
    assert slotclock.write_new(str(state), "cycle", key, dict(
        session=SESSION, slot=slotclock.z(slot), started_utc=started.isoformat(),
        invocation=invocation, result=None))
    slotclock.write_pointer(str(state), "cycle", SESSION, invocation, key)
    return key


def test_record_completes_the_runs_slot_and_records_the_slots_that_came_during_it(tmp_path):
    now = datetime.now(UTC).replace(microsecond=0)
    first = now - timedelta(seconds=45)  # slots at -45, -35, -25, -15, -5, +5 s...
    state = tmp_path / "state"
    started_record(state, first, first + timedelta(milliseconds=30), "abc123")
    env = {"MARKET_JOB": "cycle", "MARKET_SESSION": SESSION, "MARKET_GRACE_SEC": "2",
           "MARKET_SLOT_FIRST_UTC": slotclock.z(first), "MARKET_SLOT_EVERY_SEC": "10",
           "MARKET_SLOT_LAST_UTC": slotclock.z(first + timedelta(seconds=100)),
           "INVOCATION_ID": "abc123", "SERVICE_RESULT": "success", "EXIT_CODE": "exited",
           "EXIT_STATUS": "0"}
    assert record.complete_slot(env, str(state), "cycle", now) == 0
    records = slotrecords.read_slots(state, "cycle", SESSION)
    assert records[slotclock.z(first)]["result"] == "success"
    during = [slotclock.z(first + timedelta(seconds=k)) for k in (10, 20, 30, 40)]
    assert [records[s]["skipped"] for s in during] == ["overlap"] * 4
    assert {records[s]["during_run_of"] for s in during} == {slotclock.z(first)}
    assert slotclock.z(first + timedelta(seconds=50)) not in records  # may still start
    assert not list((state / "runs" / "cycle" / SESSION).glob(".invocation-*"))
    # Counting them: 4 of 11 skipped so far, the run took 45 s against a 10 s period.
    summary = slotaccount.account(state, "cycle", SESSION, PeriodicSlots.from_env(env), 2, now)
    assert (summary.total, summary.ran, summary.skipped, summary.overlap, summary.ahead) == (
        11, 1, 4, 4, 6)
    assert summary.text("cycle").startswith(
        "cycle: 4 of 11 slots skipped so far, the run takes 45 s against a 10 s period")


def test_slots_after_a_run_that_ended_are_recorded_not_started(tmp_path):
    now = datetime.now(UTC).replace(microsecond=0)
    first = now - timedelta(seconds=45)
    state = tmp_path / "state"
    key = started_record(state, first, first)
    slotrecords.update_slot(state, "cycle", key, result="success",
                     finished_utc=(first + timedelta(seconds=3)).isoformat(), duration_sec=3.0)
    schedule = PeriodicSlots(first, 10, first + timedelta(seconds=100))
    summary = slotaccount.account(state, "cycle", SESSION, schedule, 2, now)
    assert (summary.ran, summary.not_started, summary.overlap) == (1, 4, 0)
    records = slotrecords.read_slots(state, "cycle", SESSION)
    assert records[slotclock.z(first + timedelta(seconds=10))]["skipped"] == "not-started"


def test_try_refuses_when_any_slot_of_a_periodic_job_of_its_lock_group_falls_within_it(
        write_config, tmp_path, monkeypatch, capsys):
    from market_timers import cli
    from market_timers.controls import trial
    from market_timers.host import systemctl

    monkeypatch.setattr(trial, "RUNTIME_UNIT_DIR", tmp_path / "run-systemd")
    monkeypatch.setattr(systemctl, "Systemctl", lambda: type("S", (), {"start": print})())
    path = write_config("""
calendar = "XNYS"
[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-10min"
command = ["/usr/bin/true"]
lock = "orders"
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
lock = "orders"
timeout = "2min"
""")
    # 2026-12-23 17:00 UTC: mid-session; the cycle's first slot (14:35) is long past, but its
    # slot at 16:31 may still hold the lock (timeout 30 min) when the try runs.
    code = cli.main(["try", "closing-orders", "--config", str(path), "--now",
                     "2026-12-23T17:00:00Z"])
    assert code != 0
    assert "cycle's planned run for XNYS 2026-12-23 at 2026-12-23T16:31:00Z" in \
        capsys.readouterr().err


def test_a_record_step_that_cannot_read_the_cluster_dsn_still_completes_the_slot(tmp_path,
                                                                                 capsys):
    """In a cluster the record step (ExecStopPost=) may find the unit's credentials gone
    (systemd 252 gives them to ExecStart= only): a warning, the slot completed locally, exit 0,
    never a traceback (which failed the unit: a "failed with exit status 0" critical alert)."""
    now = datetime.now(UTC).replace(microsecond=0)
    first = now - timedelta(seconds=5)
    state = tmp_path / "state"
    started_record(state, first, first + timedelta(milliseconds=30), "def456")
    env = {"MARKET_JOB": "cycle", "MARKET_SESSION": SESSION, "MARKET_GRACE_SEC": "2",
           "MARKET_SLOT_FIRST_UTC": slotclock.z(first), "MARKET_SLOT_EVERY_SEC": "10",
           "MARKET_SLOT_LAST_UTC": slotclock.z(first + timedelta(seconds=100)),
           "INVOCATION_ID": "def456", "SERVICE_RESULT": "success", "EXIT_CODE": "exited",
           "EXIT_STATUS": "0", "MARKET_LEDGER": "postgresql", "MARKET_NODE": "ny4-a",
           "CREDENTIALS_DIRECTORY": str(tmp_path / "gone")}
    assert record.complete_slot(env, str(state), "cycle", now) == 0
    assert "cannot record how the slot's run ended in the run ledger" in capsys.readouterr().out
    assert slotrecords.read_slots(state, "cycle", SESSION)[slotclock.z(first)]["result"] == \
        "success"
