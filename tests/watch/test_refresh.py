"""The refresh: calendar changes between two syncs, failures that change nothing, stale calendars."""

from __future__ import annotations

from datetime import date

import pytest

from market_timers.cli import refresh
from market_timers.schedule import calendars, unitcache
from market_timers.watch import calendar_warnings

from .conftest import THANKSGIVING_CONFIG, utc

FIRST = utc("2025-12-01T12:00:00Z")  # Monday; horizon 10 covers 2025-12-01..12
SECOND = utc("2025-12-01T13:00:00Z")
FRESH = (date(2025, 11, 1), "test data")  # calendar data vintage: no age warning


def snapshot(unit_dir):
    """The units and links (not sync's record of them: schedule/unitcache.py)."""
    return {p.relative_to(unit_dir): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                      else str(p.readlink()) if p.is_symlink() else None)
            for p in sorted(unit_dir.rglob("*")) if p.name != unitcache.LOCAL_CACHE}


@pytest.fixture
def installed(make_config, fake_systemctl, alerts, tmp_path):
    """A first refresh at FIRST; returns (path of the config, stamp dir)."""
    path = make_config.write(THANKSGIVING_CONFIG)
    fake_systemctl.now = FIRST
    code = refresh.main_from_path(path, FIRST, systemctl=fake_systemctl, alert=alerts,
                                  stamp_dir=tmp_path / "stamps", data_vintage=FRESH)
    assert code == 0 and alerts.calls == []
    fake_systemctl.calls.clear()
    return path, tmp_path / "stamps"


def second_refresh(installed, make_config, fake_systemctl, alerts, text):
    path, stamps = installed
    make_config.write(text)
    fake_systemctl.now = SECOND
    return refresh.main_from_path(path, SECOND, systemctl=fake_systemctl, alert=alerts,
                                  stamp_dir=stamps, data_vintage=FRESH)


def test_new_closure_removes_that_timer_without_firing_it_and_alerts_the_diff(
        installed, make_config, fake_systemctl, alerts, tmp_path):
    unit = "market-signal@2025-12-05-204500.timer"
    assert (tmp_path / "units" / unit).exists()
    code = second_refresh(installed, make_config, fake_systemctl, alerts, THANKSGIVING_CONFIG +
                          '\n[overrides.XNYS]\nclosed = ["2025-12-05"]\n')
    assert code == 0
    assert fake_systemctl.called("stop") == [unit]
    assert unit not in fake_systemctl.called("start")
    assert fake_systemctl.called("daemon-reload") == []
    assert not (tmp_path / "units" / unit).exists()
    assert [(c["kind"], c["severity"], c["session"]) for c in alerts.calls] == [
        ("calendar-changed", "warning", "2025-12-05")]
    assert alerts.calls[0]["text"].splitlines()[0] == (
        "XNYS 2025-12-05: closed, was a session (signal was due 2025-12-05T20:45:00Z)")


def test_new_early_close_replaces_the_timer_and_alerts_moved_from_to(
        installed, make_config, fake_systemctl, alerts):
    code = second_refresh(installed, make_config, fake_systemctl, alerts, THANKSGIVING_CONFIG +
                          '\n[overrides.XNYS]\nearly_close = {"2025-12-04" = "13:00"}\n')
    assert code == 0
    assert fake_systemctl.called("stop") == ["market-signal@2025-12-04-204500.timer"]
    assert fake_systemctl.called("start") == ["market-signal@2025-12-04-174500.timer"]
    assert alerts.calls[0]["text"].splitlines()[0] == (
        "XNYS 2025-12-04: signal moved from 20:45:00Z to 17:45:00Z")


def test_unchanged_calendar_refresh_changes_nothing_and_alerts_nothing(
        installed, make_config, fake_systemctl, alerts, tmp_path):
    before = snapshot(tmp_path / "units")
    assert second_refresh(installed, make_config, fake_systemctl, alerts,
                          THANKSGIVING_CONFIG) == 0
    assert snapshot(tmp_path / "units") == before
    assert alerts.calls == [] and fake_systemctl.called("stop") == []


@pytest.mark.parametrize("broken,named", [
    (THANKSGIVING_CONFIG.replace('"-15min"', '"-15 minutes"'), "job.signal.offset"),
    (THANKSGIVING_CONFIG.replace('"XNYS"', '"XNYZ"'), "calendar"),
    (THANKSGIVING_CONFIG + "\n[watch]\nslack = 30\n", "watch.slack"),
    (THANKSGIVING_CONFIG.replace("[[job]]", "[[job]"), "not valid TOML"),
])
def test_broken_config_changes_nothing_in_unit_dir_and_alerts_critical(
        installed, make_config, fake_systemctl, alerts, tmp_path, broken, named):
    before = snapshot(tmp_path / "units")
    code = second_refresh(installed, make_config, fake_systemctl, alerts, broken)
    assert code == 2
    assert snapshot(tmp_path / "units") == before
    assert fake_systemctl.calls == []
    assert [(c["kind"], c["severity"]) for c in alerts.calls] == [("refresh-failed", "critical")]
    assert named in alerts.calls[0]["text"] and "market-timers.toml" in alerts.calls[0]["text"]


def test_exception_in_the_calendar_keeps_its_timers_and_alerts_critical(
        installed, make_config, fake_systemctl, alerts, tmp_path, monkeypatch):
    real = calendars._build

    def explode(canonical, start, end):
        if canonical == "XNYS":
            raise RuntimeError("XNYS special dates are not sessions")
        return real(canonical, start, end)

    monkeypatch.setattr(calendars, "_build", explode)
    before = snapshot(tmp_path / "units")
    code = second_refresh(installed, make_config, fake_systemctl, alerts, THANKSGIVING_CONFIG)
    assert code == 1 and snapshot(tmp_path / "units") == before
    assert fake_systemctl.called("stop") == [] and fake_systemctl.called("start") == []
    assert [(c["kind"], c["severity"]) for c in alerts.calls] == [("calendar-failed", "critical")]
    assert "XNYS special dates are not sessions" in alerts.calls[0]["text"]
    assert "calendar XNYS (job signal)" in alerts.calls[0]["text"]


def test_calendar_ending_inside_the_horizon_warns(make_config, fake_systemctl, alerts, tmp_path):
    config = make_config()
    result = refresh.run_refresh(config, FIRST, systemctl=fake_systemctl, alert=alerts,
                                 stamp_dir=tmp_path / "stamps", data_vintage=FRESH,
                                 last_session_of=lambda cal: date(2025, 12, 10))
    assert result.ok
    assert [(c["kind"], c["severity"]) for c in alerts.calls] == [("calendar-stale", "warning")]
    assert alerts.calls[0]["text"].startswith("calendar XNYS: the installed exchange_calendars")
    assert "sessions up to 2025-12-10 only; its last session is in 9 day(s)" in \
        alerts.calls[0]["text"]


def test_calendar_ending_a_year_ahead_does_not_warn(make_config):
    config = make_config()
    assert calendar_warnings.calendar_end_warnings(config, FIRST, lambda cal: date(2026, 12, 1)) == []


def test_calendar_data_older_than_max_age_warns_and_fresher_does_not():
    made = (date(2024, 12, 1), "exchange_calendars 9.9 knows XSHG holidays up to 2025-12-31")
    old = calendar_warnings.data_age_warning(utc("2026-01-05T06:00:00Z"), 365, made)
    assert old and "about 400 days old" in old and "calendar_max_age_days = 365" in old
    assert calendar_warnings.data_age_warning(utc("2025-06-01T06:00:00Z"), 365, made) is None
    assert calendar_warnings.data_age_warning(utc("2030-01-01T06:00:00Z"), 0, made) is None  # 0 = off


def test_data_vintage_of_the_installed_exchange_calendars_is_a_past_december():
    found = calendar_warnings.data_vintage()
    assert found is not None
    made, how = found
    assert made.month == 12 and "exchange_calendars" in how


def test_refresh_alert_goes_to_the_outbox_through_the_real_alert_layer(make_config, tmp_path,
                                                                       monkeypatch):
    pytest.importorskip("market_timers.alerts.api")
    path = make_config.write(THANKSGIVING_CONFIG.replace('"-15min"', '"-15 minutes"') +
                             '\n[alerts]\n[alerts.webhook]\n')
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "market-timers.webhook-url").write_text("http://127.0.0.1:9/hook")
    monkeypatch.setenv("MARKET_TIMERS_CREDENTIALS_DIRECTORY", str(creds))
    assert refresh.main_from_path(path, SECOND) == 2
    spooled = list((tmp_path / "spool").rglob("*.json"))
    assert spooled, "the refresh-failed alert was not spooled"
    assert any("job.signal.offset" in p.read_text() for p in spooled)


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root to drop privileges")
def test_refresh_as_root_raises_its_alert_in_a_child_as_the_package_user(make_config, tmp_path,
                                                                        monkeypatch):
    pytest.importorskip("market_timers.alerts.api")
    import os
    import pwd

    me = pwd.getpwuid(os.getuid())  # stands in for market-timers (absent in the test host)
    monkeypatch.setattr(refresh, "_drop_to", lambda config: me)
    forked = []
    real_fork = os.fork
    monkeypatch.setattr(refresh.os, "fork", lambda: forked.append(1) or real_fork())
    path = make_config.write(THANKSGIVING_CONFIG.replace('"-15min"', '"-15 minutes"') +
                             '\n[alerts]\n[alerts.webhook]\n')
    assert refresh.main_from_path(path, SECOND) == 2
    assert forked == [1]
    assert any("job.signal.offset" in p.read_text() for p in (tmp_path / "spool").rglob("*.json"))


ALERTS = "\n[alerts]\nrepeat_minutes = 5\n[alerts.slack]\n"


def test_every_successful_sync_writes_the_alert_snapshot_and_a_broken_refresh_uses_it(
        make_config, fake_systemctl, alerts, tmp_path):
    from market_timers.alerts import snapshot as snap

    path = make_config.write(THANKSGIVING_CONFIG + ALERTS)
    code = refresh.main_from_path(path, FIRST, systemctl=fake_systemctl, alert=alerts,
                                  stamp_dir=tmp_path / "stamps", data_vintage=FRESH)
    assert code == 0
    doc = snap.snapshot_path(tmp_path / "state").read_text()
    assert '"repeat_minutes": 5' in doc and '"written_utc": "2025-12-01T12:00:00Z"' in doc
    # Broken, [alerts] included (a valid [alerts] of its own would be used over the snapshot).
    make_config.write(THANKSGIVING_CONFIG.replace('"2min"', "60")
                      + ALERTS.replace("repeat_minutes = 5", "repeat_minutes = -1"))
    code = refresh.main_from_path(path, SECOND, systemctl=fake_systemctl, alert=alerts,
                                  stamp_dir=tmp_path / "stamps", data_vintage=FRESH)
    assert code == 2
    [cfg] = alerts.configs
    assert cfg.alerts.repeat_minutes == 5 and cfg.alerts.slack is not None
    assert "last good snapshot written by sync at 2025-12-01T12:00:00Z" in cfg.alert_note
