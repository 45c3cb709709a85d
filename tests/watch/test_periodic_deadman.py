"""The dead-man pass judges a periodic job by its slots: one skip warning per session, a critical
only when no slot has started for stall_after (or none at all), never one alert per slot.

cycle: XNYS 2026-12-24 (13:00 early close), every 1 min from 14:35 to 17:50 UTC (196 slots),
grace 20 s, stall_after 5 min (default), slack 30 s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from market_timers.runner import slotclock, slotrecords
from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman, status

from .conftest import utc

CYCLE = """\
calendar = "XNYS"
horizon = 3

[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-10min"
command = ["/bin/true"]
grace = "20s"
severity = "warning"        # its failures and skips warn; a stall is still critical
"""
SESSION = "2026-12-24"
FIRST = utc("2026-12-24T14:35:00Z")


@pytest.fixture
def synced(make_config, fake_systemctl):
    config = make_config(CYCLE)
    fake_systemctl.now = utc("2026-12-23T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    return config


def slot(k: int) -> datetime:
    return FIRST + timedelta(minutes=k)


def ran(config, k: int, seconds: float | None) -> None:
    """Slot k's run started on time and took `seconds` (None: still going)."""
    key = slotclock.record_key(SESSION, slot(k))
    start = slot(k) + timedelta(milliseconds=40)
    slotclock.write_new(str(config.state_dir), "cycle", key, dict(
        session=SESSION, slot=slotclock.z(slot(k)), started_utc=start.isoformat(), result=None))
    if seconds is not None:
        slotrecords.update_slot(config.state_dir, "cycle", key, result="success", duration_sec=seconds,
                         finished_utc=(start + timedelta(seconds=seconds)).isoformat())


def one_pass(config, systemctl, alerts, now):
    systemctl.now = now
    return deadman.run_pass(config, now, systemctl=systemctl, alert=alerts, env={})


def test_plan_json_holds_one_entry_per_session_with_its_schedule(synced):
    import json

    plan = json.loads((synced.state_dir / "plan.json").read_text())
    entry = next(e for e in plan["fires"] if e["session"] == SESSION)
    assert (entry["first_utc"], entry["last_utc"], entry["every_sec"], entry["slot_count"]) == (
        "2026-12-24T14:35:00Z", "2026-12-24T17:50:00Z", 60, 196)


def test_a_slow_run_skipping_every_other_slot_is_one_warning_with_the_count(
        synced, fake_systemctl, alerts):
    for k in range(0, 20, 2):  # 84 s runs: every other slot comes while the run is going
        ran(synced, k, 84)
    for minute in range(5, 21):
        result = one_pass(synced, fake_systemctl, alerts, slot(minute) + timedelta(seconds=30))
        assert not result.findings, result.findings
    assert alerts.kinds() == ["overlap-skipped"]
    text = alerts.calls[0]["text"]
    assert alerts.calls[0]["session"] == SESSION and alerts.calls[0]["job_severity"] == "warning"
    assert "slots skipped so far, the run takes 84 s against a 60 s period" in text
    records = slotrecords.read_slots(synced.state_dir, "cycle", SESSION)
    assert records[slotclock.z(slot(1))]["skipped"] == "overlap"
    # status counts them: 10 ran (0, 2.. 18), 10 came during a run (1, 3.. 19), and slot 20
    # (nothing ran after 18) is past its grace: not started.
    doc = status.collect(synced, session=utc("2026-12-24T00:00:00Z").date(),
                         now=slot(20) + timedelta(seconds=30), systemctl=fake_systemctl)
    row = doc["sessions"][0]["jobs"][0]
    assert (row["slots"]["ran"], row["slots"]["skipped_overlap"], row["slots"]["not_started"]) \
        == (10, 10, 1)
    assert row["result"] == "ahead: 10 ran, 11 skipped of 196"
    table = status.table(doc)
    print(table)
    line = next(li for li in table.splitlines() if " cycle " in li)
    assert "Thu 2026-12-24" in line and "09:35-12:50 EST  14:35Z-17:50Z /60s" in line
    assert "ahead: 10 ran, 11 skipped of 196" in line and "84s" in line


def test_a_hung_run_is_one_critical_after_stall_after_not_one_per_slot(
        synced, fake_systemctl, alerts):
    for k in range(10):
        ran(synced, k, 3)
    ran(synced, 10, None)  # 14:45 hangs
    quiet = one_pass(synced, fake_systemctl, alerts, utc("2026-12-24T14:50:00Z"))
    assert not quiet.findings
    first = one_pass(synced, fake_systemctl, alerts, utc("2026-12-24T14:51:45Z"))
    assert [(f.kind, f.severity) for f in first.new] == [("missed", "critical")]
    assert "stalled: no slot has started since the run of 2026-12-24T14:45:00Z" in \
        first.new[0].text and "still going" in first.new[0].text
    for minute in range(52, 70):
        again = one_pass(synced, fake_systemctl, alerts, utc(f"2026-12-24T{minute // 60 + 14}:"
                                                             f"{minute % 60:02d}:30Z"))
        assert not again.new
    assert alerts.kinds().count("missed") == 1
    assert alerts.kinds().count("overlap-skipped") == 1  # the session's one skip warning


def test_a_session_where_nothing_runs_is_one_missed_alert(synced, fake_systemctl, alerts):
    for minute in range(0, 30):
        one_pass(synced, fake_systemctl, alerts, FIRST + timedelta(minutes=minute, seconds=10))
    assert alerts.kinds().count("missed") == 1
    missed = next(c for c in alerts.calls if c["kind"] == "missed")
    assert "has not run at all" in missed["text"]
    assert missed["key"] == f"missed:cycle:{SESSION}"


def test_a_session_where_every_slot_runs_raises_nothing(synced, fake_systemctl, alerts):
    for k in range(196):
        ran(synced, k, 5)
    for now in ("2026-12-24T15:00:00Z", "2026-12-24T17:00:00Z", "2026-12-24T18:30:00Z"):
        result = one_pass(synced, fake_systemctl, alerts, utc(now))
        assert not result.findings
    assert alerts.calls == []


def test_slot_records_older_than_the_retention_are_pruned_by_the_pass(
        synced, fake_systemctl, alerts):
    ran(synced, 0, 5)
    old = synced.state_dir / "runs" / "cycle" / "2026-11-20"
    old.mkdir(parents=True)
    (old / "20261120T143500Z.json").write_text("{}")
    old_key = synced.state_dir / "ledger" / "cycle" / "2026-11-20+20261120T143500Z"
    old_key.mkdir(parents=True)
    (old_key / "attempt-1").write_text("")
    one_pass(synced, fake_systemctl, alerts, utc("2026-12-24T14:40:00Z"))  # retention 7 days
    assert not old.exists() and not old_key.exists()
    assert (synced.state_dir / "runs" / "cycle" / SESSION).is_dir()


def test_a_session_missed_whole_is_one_critical_at_a_pass_days_later(
        synced, fake_systemctl, alerts):
    # The host was off for the whole session and boots two days later: the first dead-man
    # pass reports the miss (as it does a single job's), once, and no skip warning beside it.
    later = utc("2026-12-26T09:00:00Z")
    first = one_pass(synced, fake_systemctl, alerts, later)
    assert [(f.kind, f.key, f.severity) for f in first.new] == [
        ("missed", f"missed:cycle:{SESSION}", "critical")]
    assert "ran none of its 196 slots" in first.new[0].text
    for minutes_later in (1, 2, 60):
        again = one_pass(synced, fake_systemctl, alerts, later + timedelta(minutes=minutes_later))
        assert not again.new
    assert alerts.kinds() == ["missed"]
    doc = status.collect(synced, session=utc("2026-12-24T00:00:00Z").date(), now=later,
                         systemctl=fake_systemctl)
    row = doc["sessions"][0]["jobs"][0]
    assert row["result"] == "missed: none of its 196 slots ran"
    assert (row["slots"]["ran"], row["slots"]["total"]) == (0, 196)


def test_a_session_that_ran_judged_days_later_raises_nothing(synced, fake_systemctl, alerts):
    for k in range(196):
        ran(synced, k, 5)
    for now in ("2026-12-26T09:00:00Z", "2026-12-26T09:01:00Z"):
        assert not one_pass(synced, fake_systemctl, alerts, utc(now)).findings
    assert alerts.calls == []
    doc = status.collect(synced, session=utc("2026-12-24T00:00:00Z").date(),
                         now=utc("2026-12-26T09:00:00Z"), systemctl=fake_systemctl)
    assert doc["sessions"][0]["jobs"][0]["result"] == "done: 196 ran, 0 skipped of 196"
