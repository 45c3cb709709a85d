"""A calendar whose data ends soon ([watch] calendar_warn_days): a daily warning, and in status."""

from __future__ import annotations

import ast
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from market_timers.cli import refresh
from market_timers.schedule import calendars
from market_timers.schema.problems import ConfigError
from market_timers.watch import status

XSHG = """
calendar = "XSHG"
[[job]]
name = "shanghai"
event = "close"
command = ["/bin/true"]
"""
FRESH = (date(2026, 11, 1), "test data")


def at(day: date, hour: int = 6) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


@pytest.fixture
def last():
    found = calendars.last_session("XSHG")
    assert found is not None  # XSHG keeps its holidays as yearly tables: its data ends
    return found


def run(config, now, fake_systemctl, alerts, tmp_path):
    fake_systemctl.now = now
    return refresh.run_refresh(config, now, systemctl=fake_systemctl, alert=alerts,
                               stamp_dir=tmp_path / "stamps", data_vintage=FRESH)


def ending(alerts):
    return [c for c in alerts.calls if c["key"].startswith("calendar-ends:")]


def test_data_ending_within_45_days_warns_naming_calendar_and_last_session(
        make_config, fake_systemctl, alerts, tmp_path, last):
    config = make_config(XSHG)
    result = run(config, at(last - timedelta(days=31)), fake_systemctl, alerts, tmp_path)
    assert result.ok
    [warn] = ending(alerts)
    assert (warn["kind"], warn["severity"]) == ("calendar-stale", "warning")
    assert "calendar XSHG" in warn["text"] and f"sessions up to {last} only" in warn["text"]
    assert "is in 31 day(s)" in warn["text"] and "calendar_warn_days = 45" in warn["text"]


def test_data_ending_later_than_the_warn_days_does_not_warn(
        make_config, fake_systemctl, alerts, tmp_path, last):
    config = make_config(XSHG)
    run(config, at(last - timedelta(days=46)), fake_systemctl, alerts, tmp_path)
    assert ending(alerts) == []


def test_warn_days_is_configurable_and_zero_turns_it_off(
        make_config, fake_systemctl, alerts, tmp_path, last):
    config = make_config(XSHG + "\n[watch]\ncalendar_warn_days = 90\n")
    run(config, at(last - timedelta(days=80)), fake_systemctl, alerts, tmp_path)
    assert len(ending(alerts)) == 1
    off = make_config(XSHG + "\n[watch]\ncalendar_warn_days = 0\n", name="off.toml")
    alerts.calls.clear()
    run(off, at(last - timedelta(days=3), 7), fake_systemctl, alerts, tmp_path)
    assert ending(alerts) == []


def test_the_warning_is_raised_once_a_day_however_often_the_refresh_runs(
        make_config, fake_systemctl, alerts, tmp_path, last):
    config = make_config(XSHG)
    day = last - timedelta(days=20)
    run(config, at(day, 6), fake_systemctl, alerts, tmp_path)
    run(config, at(day, 9), fake_systemctl, alerts, tmp_path)  # a reboot's refresh
    assert len(ending(alerts)) == 1
    run(config, at(day + timedelta(days=1), 6), fake_systemctl, alerts, tmp_path)
    assert len(ending(alerts)) == 2


@pytest.mark.parametrize("value", [-1, 400, "45", 4.5, True])
def test_calendar_warn_days_is_validated(make_config, value):
    text = XSHG + f"\n[watch]\ncalendar_warn_days = {value!r}\n".replace("'", '"').replace(
        "True", "true")
    with pytest.raises(ConfigError, match=r"watch\.calendar_warn_days: must be a whole number "
                       r"from 0 to 366"):
        make_config(text)


def test_status_shows_the_data_end_warning(make_config, fake_systemctl, alerts, tmp_path,
                                           capsys, last):
    config = make_config(XSHG)
    now = at(last - timedelta(days=10))
    run(config, now, fake_systemctl, alerts, tmp_path)
    assert status.command(config, None, False, now, systemctl=fake_systemctl) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: calendar XSHG: the installed exchange_calendars")
    assert f"sessions up to {last} only" in out


def test_status_of_a_rule_based_calendar_has_no_data_end_warning(make_config, fake_systemctl,
                                                                alerts, tmp_path, capsys):
    config = make_config()
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    run(config, now, fake_systemctl, alerts, tmp_path)
    assert status.command(config, None, True, now, systemctl=fake_systemctl) == 0
    assert '"calendar_warnings": []' in capsys.readouterr().out


def test_refresh_alerts_a_bad_override_instead_of_crashing(make_config, fake_systemctl, alerts,
                                                           tmp_path):
    path = make_config.write(XSHG.replace("XSHG", "XNYS") +
                             '\n[overrides.XNYS]\nearly_close = { "2026-12-24" = "24:00" }\n')
    code = refresh.main_from_path(path, at(date(2026, 12, 1)), systemctl=fake_systemctl,
                                  alert=alerts, stamp_dir=tmp_path / "stamps",
                                  data_vintage=FRESH)
    assert code == 2
    assert [(c["kind"], c["severity"]) for c in alerts.calls] == [("refresh-failed", "critical")]
    assert "overrides.XNYS.early_close.2026-12-24" in alerts.calls[0]["text"]


def test_only_calendars_py_imports_exchange_calendars():
    package = Path(calendars.__file__).parent  # the whole package, watch/ included
    importers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "exchange_calendars" for n in names):
                importers.add(path.name)
    assert importers == {"calendars.py"}
