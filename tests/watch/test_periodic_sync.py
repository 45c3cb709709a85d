"""sync and refresh with a periodic job: one timer per session, kept while the session runs, a
changed window is a new unit (never an edit in place), and a finished session is neither a
"change" nor deleted before the retention."""

from __future__ import annotations

from datetime import date

from market_timers.cli import refresh
from market_timers.contracts import unitname
from market_timers.schedule import sync as sync_mod

from .conftest import utc

CYCLE = """\
calendar = "XNYS"
horizon = 2
retention_days = 1

[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-10min"
command = ["/bin/true"]
grace = "20s"
"""
FRESH = (date(2026, 11, 1), "test data")


def timers(config) -> list[str]:
    return sorted(p.name for p in config.unit_dir.glob("*.timer"))


def sync(config, systemctl, now, tmp_path):
    systemctl.now = utc(now)
    return sync_mod.sync(config, now=systemctl.now, systemctl=systemctl,
                         stamp_dir=tmp_path / "stamps")


def test_one_timer_per_session_kept_while_the_session_runs(make_config, fake_systemctl,
                                                          tmp_path):
    config = make_config(CYCLE)
    first = sync(config, fake_systemctl, "2026-12-23T12:00:00Z", tmp_path)
    assert [unitname.parse(n).session for n in first.started] == ["2026-12-23", "2026-12-24"]
    assert sync(config, fake_systemctl, "2026-12-23T12:00:30Z", tmp_path).lines() == [
        "nothing to do"]
    # Mid-session: the 2026-12-23 timer still has slots ahead; it stays, nothing is rewritten.
    mid = sync(config, fake_systemctl, "2026-12-23T17:00:00Z", tmp_path)
    assert not (mid.removed or mid.rewritten or mid.changes or mid.reloaded), mid.lines()
    assert any("2026-12-23" in n for n in timers(config))
    # After the session: not "removed" (no change to report), kept until the retention.
    after = sync(config, fake_systemctl, "2026-12-23T22:00:00Z", tmp_path)
    assert not (after.removed or after.changes), after.lines()
    assert any("2026-12-23" in n for n in timers(config))
    later = sync(config, fake_systemctl, "2026-12-25T22:00:00Z", tmp_path)
    assert any("2026-12-23" in n for n in later.expired)
    assert not later.changes


def test_a_new_early_close_is_a_new_unit_and_a_change_naming_the_new_last_slot(
        make_config, fake_systemctl, alerts, tmp_path):
    path = make_config.write(CYCLE)
    fake_systemctl.now = utc("2026-12-22T12:00:00Z")
    assert refresh.main_from_path(path, fake_systemctl.now, systemctl=fake_systemctl,
                                  alert=alerts, stamp_dir=tmp_path / "stamps",
                                  data_vintage=FRESH) == 0
    before = [n for n in timers(make_config(CYCLE)) if "2026-12-23" in n]
    make_config.write(CYCLE + '\n[overrides.XNYS]\nearly_close = { "2026-12-23" = "13:00" }\n')
    fake_systemctl.now = utc("2026-12-22T13:00:00Z")
    assert refresh.main_from_path(path, fake_systemctl.now, systemctl=fake_systemctl,
                                  alert=alerts, stamp_dir=tmp_path / "stamps",
                                  data_vintage=FRESH) == 0
    after = [p.name for p in (tmp_path / "units").glob("*.timer") if "2026-12-23" in p.name]
    assert len(before) == len(after) == 1 and before != after
    assert before[0] in fake_systemctl.called("stop")
    assert fake_systemctl.called("daemon-reload") == []
    texts = [c["text"] for c in alerts.calls if c["kind"] == "calendar-changed"]
    assert any("XNYS 2026-12-23: cycle moved from 20:50:00Z to 17:50:00Z" in t
               for t in texts), texts  # the last slot: 15:50 -> 12:50 New York
