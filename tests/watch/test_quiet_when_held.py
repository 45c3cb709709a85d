"""Quiet where nothing is wrong (issue 45, item 5): a periodic slot refused by a pause or a halt
is info for the digest, never the session's skip warning; resuming a periodic job paused longer
than its stall_after raises no stall (the stall clock restarts at the resume); a timer whose run
is going (systemd: active/running) is never "not scheduled".

Seen on Debian 12: a paused periodic job's first refused slot sent "slots skipped … refused (late
or lock busy)" to Telegram; its resume brought a critical "tick did not run" then a "recovered";
"`pticker` is not scheduled … active/running, not waiting" while its slot ran."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.watch.test_periodic_deadman import CYCLE, SESSION, one_pass, ran, slot

from market_timers import ledger
from market_timers.alerts.skipped_slots import on_handler
from market_timers.contracts import environment, slotcount
from market_timers.contracts.slotcount import SlotCount
from market_timers.runner import slotclock
from market_timers.runner.slotaccount import account
from market_timers.runner.slotclock import PeriodicSlots
from market_timers.schedule import sync as sync_mod
from market_timers.watch import status

from .conftest import AlertRecorder, utc


@pytest.fixture
def cycle(make_config, fake_systemctl):
    """test_periodic_deadman.py's `cycle`: every 1 min from 14:35 to 17:50 UTC, stall_after 5 min."""
    config = make_config(CYCLE)
    fake_systemctl.now = utc("2026-12-23T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    return config


def held(config, k: int, why: str = "paused") -> None:
    """Slot k's start was refused by the runner: the job or its group is paused (or halted)."""
    key = slotclock.record_key(SESSION, slot(k))
    slotclock.write_new(str(config.state_dir), "cycle", key, dict(
        session=SESSION, slot=slotclock.z(slot(k)), scheduled_utc=slotclock.z(slot(k)),
        started_utc=(slot(k) + timedelta(milliseconds=30)).isoformat(), result=None,
        refused=why, scope="job cycle"))


def handler_after(config, k: int, kind: str) -> AlertRecorder:
    """What the alert handler raises for slot k's start, after its record step's count."""
    entry = next(e for e in _plan(config) if e["session"] == SESSION)
    now = slot(k) + timedelta(seconds=1)
    summary = account(config.state_dir, "cycle", SESSION, PeriodicSlots.from_plan(entry), 20, now)
    slotcount.write(ledger.slot_records_dir(config.state_dir, "cycle", SESSION),
                    SlotCount.of(summary, "cycle"))
    recorder = AlertRecorder()
    info = {environment.JOB: "cycle", environment.SESSION: SESSION,
            environment.SLOT_EVERY_SEC: "60", environment.STATE_DIR: str(config.state_dir),
            environment.SEVERITY: "warning"}
    on_handler(config, info, kind, now=now, raise_alert=recorder)
    return recorder


def _plan(config) -> list[dict]:
    import json

    return json.loads((config.state_dir / "plan.json").read_text())["fires"]


@pytest.mark.parametrize("why", ["paused", "halted"])
def test_a_held_slot_is_no_skip_warning(cycle, why):
    for k in range(5):
        ran(cycle, k, 3)
    for k in range(5, 10):
        held(cycle, k, why)
        assert handler_after(cycle, k, why).calls == []


def test_the_digest_counts_held_slots_apart_from_the_skips(cycle, fake_systemctl):
    for k in range(5):
        ran(cycle, k, 3)
    for k in range(5, 10):
        held(cycle, k)
    entry = next(e for e in _plan(cycle) if e["session"] == SESSION)
    summary = account(cycle.state_dir, "cycle", SESSION, PeriodicSlots.from_plan(entry), 20,
                      slot(10))
    assert (summary.held, summary.skipped) == (5, 0)
    assert "refused (late or lock busy)" not in summary.text("cycle")
    assert "5 held by a pause or halt" in summary.text("cycle")
    doc = status.collect(cycle, session=slot(0).date(), now=slot(10), systemctl=fake_systemctl)
    row = doc["sessions"][0]["jobs"][0]
    assert row["slots"]["held"] == 5 and row["result"] == "ahead: 5 ran, 0 skipped, 5 held of 196"


def test_a_real_skip_after_a_pause_still_warns_once(cycle):
    for k in range(5):
        ran(cycle, k, 3)
    for k in range(5, 10):
        held(cycle, k)
    ran(cycle, 10, 84)  # 14:45 takes 84 s: 14:46 comes while it runs
    warned = handler_after(cycle, 12, "ok")  # 14:47, past 14:46 and its grace
    assert [c["kind"] for c in warned.calls] == ["overlap-skipped"]
    assert "1 of 196 slots skipped so far" in warned.calls[0]["text"]


def test_resuming_after_a_pause_longer_than_stall_after_raises_no_stall(cycle, fake_systemctl,
                                                                      alerts):
    for k in range(10):
        ran(cycle, k, 3)
    for k in range(10, 30):  # paused 14:45 to 15:04: 20 min, stall_after is 5 min
        held(cycle, k)
    # resumed at 15:04:40: the passes before the next slot and after the next two
    assert one_pass(cycle, fake_systemctl, alerts, utc("2026-12-24T15:04:45Z")).findings == []
    for k, now in ((30, "2026-12-24T15:05:30Z"), (31, "2026-12-24T15:06:30Z")):
        ran(cycle, k, 3)
        assert one_pass(cycle, fake_systemctl, alerts, utc(now)).findings == []
    assert alerts.calls == []


def test_the_stall_clock_restarts_at_the_resume_and_still_runs(cycle, fake_systemctl, alerts):
    for k in range(10):
        ran(cycle, k, 3)
    for k in range(10, 30):
        held(cycle, k)
    # resumed after 15:04, and then nothing starts: a stall 5 min after the resume, once
    assert one_pass(cycle, fake_systemctl, alerts, utc("2026-12-24T15:08:30Z")).findings == []
    stalled = one_pass(cycle, fake_systemctl, alerts, utc("2026-12-24T15:10:45Z"))
    assert [(f.kind, f.severity) for f in stalled.new] == [("missed", "critical")]


def test_a_session_held_whole_is_not_a_miss(cycle, fake_systemctl, alerts):
    for k in range(196):
        held(cycle, k, "halted")
    assert one_pass(cycle, fake_systemctl, alerts, utc("2026-12-26T09:00:00Z")).findings == []
    assert alerts.calls == []


def test_a_timer_whose_run_is_going_is_not_reported_not_scheduled(make_config, fake_systemctl,
                                                                  alerts):
    from tests.watch.test_deadman import one_pass as single_pass

    from .conftest import THANKSGIVING_CONFIG

    config = make_config(THANKSGIVING_CONFIG)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    unit = "market-signal@2025-11-26-204500.timer"
    shown = fake_systemctl.show

    def show(units, props):  # its service runs (a pre-fired start waits for its instant)
        out = shown(units, props)
        if unit in out:
            out[unit] = dict(out[unit], ActiveState="active", SubState="running")
        return out

    fake_systemctl.show = show
    result = single_pass(config, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    assert [f for f in result.findings if f.kind == "not-scheduled"] == []
