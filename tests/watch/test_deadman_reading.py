"""What a dead-man pass reads (issue 46): its cost follows what is due, not what exists. Once the
timers of a plan have been checked, a pass reads the timers whose fire is near (LOOKAHEAD) and the
run records of the fires whose deadline passed since the last pass; a new plan (a sync that
changed something) has every upcoming timer checked again.

The seed's Thanksgiving week: signal at close - 15 min, missed 7 min 30 s after its instant.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman

from .conftest import utc
from .test_deadman import DUE, one_pass, record_run

TIMER = "market-signal@{}-204500.timer"


@pytest.fixture
def week(make_config, fake_systemctl):
    config = make_config()
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    fake_systemctl.calls.clear()
    return config


def shown(systemctl) -> list[str]:
    """The job timers a pass asked systemd about (the package's own services aside)."""
    return [u for u in systemctl.called("show") if u.startswith("market-signal@")]



def test_after_the_first_check_a_pass_reads_only_the_timers_whose_fire_is_near(
        week, fake_systemctl, alerts):
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    assert len(shown(fake_systemctl)) == 10  # the first pass of a plan: every timer
    fake_systemctl.calls.clear()
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T13:00:00Z"))
    assert shown(fake_systemctl) == []  # nothing due within the lookahead
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T20:35:00Z"))
    assert shown(fake_systemctl) == [TIMER.format("2025-11-24")]
    assert deadman.LOOKAHEAD == timedelta(minutes=15)


def test_a_timer_stopped_later_is_reported_once_its_fire_is_near(week, fake_systemctl, alerts):
    for session in ("2025-11-24", "2025-11-25"):
        record_run(week, session)
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    fake_systemctl.active.discard(TIMER.format("2025-11-26"))  # stopped by hand
    one_pass(week, fake_systemctl, alerts, utc("2025-11-25T12:00:00Z"))
    assert alerts.calls == []
    one_pass(week, fake_systemctl, alerts, utc("2025-11-26T20:31:00Z"))
    assert [(c["kind"], c["session"]) for c in alerts.calls] == [("not-scheduled", "2025-11-26")]


def test_a_sync_that_changed_a_unit_has_every_upcoming_timer_checked_again(
        week, fake_systemctl, alerts):
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    (week.unit_dir / TIMER.format("2025-11-25")).unlink()  # deleted by hand: sync writes it
    sync_mod.sync(week, now=utc("2025-11-24T12:05:00Z"), systemctl=fake_systemctl,
                  stamp_dir=week.state_dir / "stamps")
    fake_systemctl.calls.clear()
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:10:00Z"))
    assert len(shown(fake_systemctl)) == 10


def test_a_sync_with_nothing_to_do_leaves_the_pass_reading_only_what_is_near(
        week, fake_systemctl, alerts):
    """It writes no plan.json (issue 46: an unchanged sync writes nothing), so the timers
    already checked are not all read again."""
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))
    result = sync_mod.sync(week, now=utc("2025-11-24T12:05:00Z"), systemctl=fake_systemctl,
                           stamp_dir=week.state_dir / "stamps")
    assert not result.changed_anything
    fake_systemctl.calls.clear()
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:10:00Z"))
    assert shown(fake_systemctl) == []


def test_a_pass_reads_the_records_of_the_fires_whose_deadline_passed_since_the_last(
        week, fake_systemctl, alerts, reads):
    for session in ("2025-11-24", "2025-11-25", "2025-11-26"):
        record_run(week, session)
    one_pass(week, fake_systemctl, alerts, utc("2025-11-26T22:00:00Z"))
    assert {("signal", s) for s in ("2025-11-24", "2025-11-25", "2025-11-26")} <= set(reads)
    reads.clear()
    one_pass(week, fake_systemctl, alerts, utc("2025-11-26T22:01:00Z"))
    assert reads == []  # nothing came due, nothing is near
    one_pass(week, fake_systemctl, alerts, utc("2025-11-28T17:53:00Z"))  # 17:45 + 7 min 30 s
    assert reads == [("signal", "2025-11-28")] and alerts.calls == [
        {**alerts.calls[0], "kind": "missed", "session": "2025-11-28"}]


def test_an_open_miss_is_still_found_at_every_pass(week, fake_systemctl, alerts, reads):
    first = one_pass(week, fake_systemctl, alerts, utc("2025-11-24T22:00:00Z"))
    second = one_pass(week, fake_systemctl, alerts, utc("2025-11-24T22:01:00Z"))
    assert [f.kind for f in first.new] == ["missed"] and second.new == []
    assert [(f.kind, f.session) for f in second.findings] == [("missed", "2025-11-24")]
    assert reads[-1] == ("signal", "2025-11-24") and DUE


def test_a_pass_that_could_not_read_the_ledger_judges_those_fires_again(
        week, fake_systemctl, alerts, monkeypatch):
    """A pass that failed (the ledger unreachable) moves nothing on: the next one judges the
    fires that came due meanwhile."""
    broken = {"on": True}
    read = runrecord.read

    def flaky(*args, **kw):
        if broken["on"]:
            raise OSError("ledger directory unreadable")
        return read(*args, **kw)

    monkeypatch.setattr(runrecord, "read", flaky)
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T22:00:00Z"))
    broken["on"] = False
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T22:01:00Z"))
    assert [(c["kind"], c["session"]) for c in alerts.calls] == [("missed", "2025-11-24")]


def test_an_idle_pass_asks_systemd_once_for_the_failed_units_and_nothing_else(
        week, fake_systemctl, alerts):
    """One `list-units --state=failed` answers both the job units' sweep (endsweep.py) and the
    package's own services (PID 1 filters by state before it matches a name: a listing of
    named units makes it match every unit it holds against each name)."""
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T12:00:00Z"))  # every timer read
    fake_systemctl.calls.clear()
    one_pass(week, fake_systemctl, alerts, utc("2025-11-24T13:00:00Z"))
    assert [verb for verb, _ in fake_systemctl.calls] == ["list-failed"]
    [(_, patterns)] = fake_systemctl.calls
    assert set(deadman.OWN_SERVICES) < set(patterns)


def test_a_failed_service_of_the_package_is_still_told(week, fake_systemctl, alerts):
    fake_systemctl.failed = {"market-outbox.service", "market-signal@2025-11-24-204500.service"}
    result = one_pass(week, fake_systemctl, alerts, utc("2025-11-24T13:00:00Z"))
    assert result.unhealthy == ["failed: market-outbox.service"]
    assert [c["kind"] for c in alerts.calls] == ["failed"]  # the job unit's untold failure
