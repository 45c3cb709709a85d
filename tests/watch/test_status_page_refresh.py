"""The status page after each dead-man pass (issue 46): rewritten when what it shows changed, and
only then: a pass with nothing new reads no run record and asks systemd about no job's timer for
the page, yet the page's health still names that pass; a run, a fire's instant or deadline going
by, a halt, each shows at the next pass as it did when every pass rewrote the page.

The Thanksgiving week of test_status_page.py: signal (20:45) and orders (20:50), runs recorded
on Monday to Wednesday but orders on Tuesday; Friday 2025-11-28 is the early close (17:45/17:50).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from market_timers.ledger import runrecord
from market_timers.watch import deadman, status, statuspage

from .conftest import utc
from .test_status_page import NOW, Cells, week  # noqa: F401  (the fixture)


@pytest.fixture
def passes(week, fake_systemctl, monkeypatch):  # noqa: F811
    """passes(at): one `market-timers deadman` (the pass, then the page) at `at`; the page's
    cells by (job, session), and its text."""
    real = deadman.run_pass
    monkeypatch.setattr(deadman, "run_pass", lambda cfg, t: real(
        cfg, t, systemctl=fake_systemctl, alert=lambda *a, **k: None, env={}))
    monkeypatch.setattr(status, "Systemctl", lambda: fake_systemctl)
    week.page_dir.mkdir()

    def one(at):
        fake_systemctl.now = at
        deadman.command(week, at)
        text = (week.page_dir / statuspage.PAGE_FILE).read_text()
        cells = Cells()
        cells.feed(text)
        return cells.cells, text

    return one



def job_timers(systemctl) -> list[str]:
    return [u for u in systemctl.called("show") if u.startswith(("market-signal@",
                                                                 "market-orders@"))]


def test_a_pass_with_nothing_new_reads_no_record_and_no_timer_for_the_page(
        passes, fake_systemctl, reads):
    passes(NOW)
    passes(NOW + timedelta(minutes=1))  # the pass that checks the new plan's timers
    reads.clear()
    fake_systemctl.calls.clear()
    _, text = passes(NOW + timedelta(minutes=2))
    # the one record read is the open miss's (orders on Tuesday): the pass judges it again
    assert reads == [("orders", "2025-11-25")] and job_timers(fake_systemctl) == []
    assert "last dead-man pass 2025-11-26T21:02:00Z" in text  # its health: this pass


def test_a_run_recorded_between_passes_shows_at_the_next(passes, week):  # noqa: F811
    cells, _ = passes(NOW)
    assert cells[("orders", "2025-11-25")] == "missed"
    runrecord.update(week.state_dir, "orders", "2025-11-25", started_utc="2025-11-26T21:00:30Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=1)
    cells, _ = passes(NOW + timedelta(minutes=1))
    assert cells[("orders", "2025-11-25")] == "ok"


def test_a_fire_going_due_then_missed_shows_at_the_next_pass(passes):
    cells, _ = passes(utc("2025-11-28T17:40:00Z"))
    assert cells[("signal", "2025-11-28")] == "scheduled"
    cells, _ = passes(utc("2025-11-28T17:41:00Z"))
    assert cells[("signal", "2025-11-28")] == "scheduled"
    cells, _ = passes(utc("2025-11-28T17:46:00Z"))
    assert cells[("signal", "2025-11-28")] == "due"
    cells, _ = passes(utc("2025-11-28T17:53:00Z"))  # 17:45 + 2 min + 5 min + 30 s
    assert cells[("signal", "2025-11-28")] == "missed"


def test_a_halt_between_passes_shows_at_the_next(passes, week):  # noqa: F811
    from market_timers.controls import halt

    class NothingRuns:
        def running(self, patterns):
            return []

    passes(NOW)
    assert halt.halt(week, "orders", None, False, "drill", NOW, systemctl=NothingRuns()) == 0
    cells, text = passes(NOW + timedelta(minutes=1))
    assert cells[("orders", "2025-11-28")] == "halted" and "drill" in text


def test_a_slot_record_written_after_a_periodic_sessions_window_shows_at_the_next_pass(
        make_config, fake_systemctl, monkeypatch, tmp_path):
    """A periodic job's cell counts its slot records (runs/<job>/<session>/): one written or
    rewritten once the session reads done (a run recorded late) is a change of the page's
    inputs like any run record."""
    from market_timers.runner import slotclock, slotrecords
    from market_timers.schedule import sync as sync_mod

    from .test_periodic_deadman import CYCLE, SESSION, slot

    config = make_config(CYCLE)
    fake_systemctl.now = utc("2026-12-23T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    for k in range(195):  # every slot ran but the last (17:50), which no start reached
        key = slotclock.record_key(SESSION, slot(k))
        slotclock.write_new(str(config.state_dir), "cycle", key, dict(
            session=SESSION, slot=slotclock.z(slot(k)), started_utc=slotclock.z(slot(k)),
            result="success", duration_sec=1))
    real = deadman.run_pass
    monkeypatch.setattr(deadman, "run_pass", lambda cfg, t: real(
        cfg, t, systemctl=fake_systemctl, alert=lambda *a, **k: None, env={}))
    monkeypatch.setattr(status, "Systemctl", lambda: fake_systemctl)
    config.page_dir.mkdir()
    page = config.page_dir / statuspage.PAGE_FILE

    def cell_at(at):
        fake_systemctl.now = at
        deadman.command(config, at)
        cells = Cells()
        cells.feed(page.read_text())
        return cells.cells[("cycle", SESSION)], page.read_text()

    state, text = cell_at(utc("2026-12-24T18:30:00Z"))
    assert state == "skipped" and "195 ran, 1 skipped of 196" in text
    cell_at(utc("2026-12-24T18:31:00Z"))
    # the last slot's run, recorded late: its record (the skip account() wrote) is rewritten
    slotrecords.update_slot(config.state_dir, "cycle", slotclock.record_key(SESSION, slot(195)),
                            skipped=None, started_utc=slotclock.z(slot(195)), result="success",
                            duration_sec=1)
    state, text = cell_at(utc("2026-12-24T18:32:00Z"))
    assert state == "ok" and "196 ran, 0 skipped of 196" in text


def test_the_page_asks_systemd_about_no_jobs_timer(week, fake_systemctl, tmp_path):  # noqa: F811
    """The page shows no timer's state: at 1,000 jobs asking about its 17,000 timers was PID 1's
    work at every rebuild and every `status --html` for nothing shown."""
    fake_systemctl.calls.clear()  # sync's
    assert status.command(week, html=str(tmp_path / "s.html"), now=NOW,
                          systemctl=fake_systemctl) == 0
    assert job_timers(fake_systemctl) == []
    cells = Cells()
    cells.feed((tmp_path / "s.html").read_text())
    assert cells.cells[("orders", "2025-11-25")] == "missed"
