"""The handlers for a periodic job's unit: skipped slots are counted into one warning per session,
never one alert per slot; a success still goes through the usual recovery logic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from market_timers.alerts.commands import alert_handler
from market_timers.channels.credentials import OVERRIDE
from market_timers.runner import record, slotclock, slotrecords

UNIT = "market-cycle@2026-11-30-142000-abcdef.service"
INVOCATION = "0123456789abcdef0123456789abcdef"
FIRST = datetime(2026, 11, 30, 14, 20, tzinfo=UTC)  # the clock fixture: 14:31:05


def unit_environment(state_dir) -> dict:
    return {"MARKET_JOB": "cycle", "MARKET_SESSION": "2026-11-30", "MARKET_CALENDAR": "XNYS",
            "MARKET_EVENT": "every", "MARKET_SLOT_FIRST_UTC": "2026-11-30T14:20:00Z",
            "MARKET_SLOT_EVERY_SEC": "60", "MARKET_SLOT_LAST_UTC": "2026-11-30T15:00:00Z",
            "MARKET_GRACE_SEC": "20", "MARKET_SEVERITY": "critical",
            "MARKET_STATE_DIR": str(state_dir)}


def fake_systemd(state_dir):
    def run(argv):
        if argv[0] == "systemctl":
            env = unit_environment(state_dir)
            return "Environment=" + " ".join(f"{k}={v}" for k, v in env.items()) + "\n"
        return ""

    return run


def monitor(result, code, status):
    return {"MONITOR_SERVICE_RESULT": result, "MONITOR_EXIT_CODE": code,
            "MONITOR_EXIT_STATUS": status, "MONITOR_INVOCATION_ID": INVOCATION,
            "MONITOR_UNIT": UNIT}


@pytest.fixture
def handle(make_ctx, creds, clock, tmp_path):
    ctx = make_ctx()

    def go(mode, env):
        # as systemd does: the unit's ExecStopPost= (the record step, which counts the slots)
        # ends before its OnFailure=/OnSuccess= handler starts
        state = tmp_path / "state"
        record.complete_slot({**unit_environment(state), "INVOCATION_ID": INVOCATION}, str(state),
                             "cycle", clock())
        return alert_handler(ctx, mode, UNIT, env={**env, OVERRIDE: str(creds)},
                             run=fake_systemd(tmp_path / "state"), now=clock)

    return go


def ran(state, k: int, seconds: float) -> None:
    slot = FIRST + timedelta(minutes=k)
    key = slotclock.record_key("2026-11-30", slot)
    start = slot + timedelta(milliseconds=40)
    slotclock.write_new(str(state), "cycle", key, dict(
        session="2026-11-30", slot=slotclock.z(slot), started_utc=start.isoformat()))
    slotrecords.update_slot(state, "cycle", key, result="success", duration_sec=seconds,
                     finished_utc=(start + timedelta(seconds=seconds)).isoformat())


def test_lock_busy_refusals_of_many_slots_are_one_warning(handle, api, tmp_path):
    for k in range(9):
        ran(tmp_path / "state", k, 5)
    for _ in range(3):  # three slots refused (another job of the lock group was running)
        assert handle("failure", monitor("exit-code", "exited", "171")) == 0
    [msg] = api.received()
    assert msg["service"] == "slack" and msg["text"].startswith("[WARNING]")
    assert "slots skipped" in msg["text"]


def test_a_long_run_that_swallowed_a_slot_warns_once_with_its_duration(handle, api, tmp_path):
    state = tmp_path / "state"
    for k in range(9):
        ran(state, k, 5)
    ran(state, 9, 84)  # 14:29:00 .. 14:30:24: the 14:30 slot came while it was going
    handle("success", monitor("success", "exited", "0"))
    handle("success", monitor("success", "exited", "0"))
    [msg] = api.received()
    assert "cycle: 1 of 41 slots skipped so far, the run takes 84 s against a 60 s period" in \
        msg["text"]


def test_a_failed_slot_run_is_still_alerted(handle, api, tmp_path):
    for k in range(10):
        ran(tmp_path / "state", k, 5)
    handle("failure", monitor("exit-code", "exited", "3"))
    [msg] = api.received("telegram")
    assert "cycle failed with exit status 3" in msg["text"]


def test_the_digest_counts_the_sessions_slots_instead_of_listing_every_run(
        handle, make_ctx, tmp_path):
    import json

    from market_timers.alerts.digest import build

    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / "plan.json").write_text(json.dumps({"fires": [{
        "job": "cycle", "session": "2026-11-30", "every_sec": 60, "grace_sec": 20,
        "first_utc": "2026-11-30T14:20:00Z", "last_utc": "2026-11-30T15:00:00Z",
        "fire_utc": "2026-11-30T14:20:00Z", "pause_utc": None}]}))
    for k in range(9):
        ran(state, k, 5)
    ran(state, 9, 84)
    for _ in range(10):  # each run's success handler
        handle("success", monitor("success", "exited", "0"))
    body = build(make_ctx(), "2026-11-30")
    print(body)
    assert "  cycle: overlap-skipped, ok x10; duration" in body
    assert ("  cycle: 1 of 41 slots skipped so far, the run takes 84 s against a 60 s period "
            "(1 while a run was still going); 10 ran, 30 not yet due") in body


def test_the_boot_start_refused_after_a_wholly_missed_window_is_no_skip_warning(
        handle, api, clock):
    # The host was down for the whole window (14:20..15:00): at boot Persistent=true starts the
    # unit once and the runner refuses it (stale). Nothing ran and nothing is ahead: that is the
    # dead-man's one critical miss, not a "41 of 41 slots skipped" warning beside it.
    clock.advance(hours=2)
    assert handle("failure", monitor("exit-code", "exited", "170")) == 0
    assert api.received() == []


def failed_slot(state, k: int, invocation: str) -> None:
    """Slot k's run, started by systemd's `invocation`, which failed (its record says so)."""
    slot = FIRST + timedelta(minutes=k)
    key = slotclock.record_key("2026-11-30", slot)
    slotclock.write_new(str(state), "cycle", key, dict(
        session="2026-11-30", slot=slotclock.z(slot), started_utc=slot.isoformat(),
        invocation=invocation))
    slotrecords.update_slot(state, "cycle", key, result="exit-code", exit_status=3)


def test_each_failed_slot_is_an_incident_of_its_own(make_ctx, creds, clock, api, tmp_path):
    """Issue 45: a periodic job's incident is (job, session, slot, reason): the failure of the
    14:31 slot is not folded into the 14:30 slot's alert of the same session."""
    ctx = make_ctx(dedup_minutes=30, repeat_minutes=0)
    state = tmp_path / "state"
    for k, invocation in ((10, "a" * 32), (11, "b" * 32)):
        failed_slot(state, k, invocation)
        clock.advance(minutes=1)
        env = {**monitor("exit-code", "exited", "3"), "MONITOR_INVOCATION_ID": invocation}
        alert_handler(ctx, "failure", UNIT, env={**env, OVERRIDE: str(creds)},
                      run=fake_systemd(state), now=clock)
    sent = [m["text"] for m in api.received("telegram")]
    assert len(sent) == 2, sent
    assert "slot: 2026-11-30T14:30:00Z" in sent[0] and "slot: 2026-11-30T14:31:00Z" in sent[1]


def test_a_slots_success_resolves_its_own_and_older_slots_only(make_ctx, clock, api):
    from market_timers.alerts.api import raise_alert, record_success

    ctx = make_ctx(repeat_minutes=0)
    raise_alert(ctx, kind="failed", job="cycle", session="2026-11-30",
                details={"slot": "2026-11-30T14:30:00Z"})
    raise_alert(ctx, kind="failed", job="cycle", session="2026-11-30",
                details={"slot": "2026-11-30T14:32:00Z"})
    clock.advance(minutes=1)
    record_success(ctx, job="cycle", session="2026-11-30",
                   details={"slot": "2026-11-30T14:31:00Z"})
    sent = [m["text"] for m in api.received("telegram")]
    assert len(sent) == 3 and "recovered" in sent[-1]
    assert "still failed: 2026-11-30 slot 2026-11-30T14:32:00Z" in sent[-1]
