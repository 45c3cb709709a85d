"""Calendars are built for the window asked for, and where their data ends is said honestly."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from market_timers import cli
from market_timers.config import loader as config
from market_timers.schedule import calendars, plan

SIGNAL = """
calendar = "XNYS"
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
"""


def test_plan_from_2005_starts_in_2005_not_at_exchange_calendars_default(write_config):
    cfg = config.load(write_config(SIGNAL))
    got = plan.plan_between(cfg, date(2005, 1, 1), date(2007, 12, 31))
    assert got[0].session == date(2005, 1, 3)  # the first NYSE session of 2005
    assert got[-1].session == date(2007, 12, 31)
    assert len({f.session for f in got}) == 252 + 251 + 251  # NYSE sessions 2005, 2006, 2007


def test_cli_plan_out_of_range_names_the_range_rule_not_the_installed_data(write_config,
                                                                         capsys):
    path = write_config(SIGNAL)
    code = cli.main(["--config", str(path), "plan", "--from", "1850-01-01", "--to",
                     "1850-01-31"])
    err = capsys.readouterr().err
    assert code == 2
    assert "market-timers plans and checks dates from 1990-01-01" in err
    assert "installed" not in err


@pytest.mark.parametrize("start,end", [("1850-01-01", "1850-02-01"),
                                       ("2035-01-01", "2035-02-01")])
def test_check_cron_applies_the_same_range_rule_as_plan(write_config, capsys, start, end):
    path = write_config(SIGNAL)
    cron = cli.main(["check-cron", "45 15 * * 1-5", "--calendar", "XNYS", "--from", start,
                     "--to", end])
    cron_err = capsys.readouterr().err
    planned = cli.main(["--config", str(path), "plan", "--from", start, "--to", end])
    plan_err = capsys.readouterr().err
    assert cron == planned == 2
    for err in (cron_err, plan_err):
        assert "market-timers plans and checks dates from 1990-01-01 to" in err


def test_check_cron_inside_the_range_before_the_old_default_window_works(capsys):
    assert cli.main(["check-cron", "45 15 * * 1-5", "--tz", "America/New_York", "--calendar",
                     "XNYS", "--from", "2005-11-21", "--to", "2005-11-25"]) == 0
    out = capsys.readouterr().out
    assert "fires: 5  on time: 0  no session: 1  other time: 4" in out  # 2005-11-24 Thanksgiving


def test_data_end_is_the_calendars_own_bound_not_a_default_window():
    first, last = calendars.data_limits("XSHG")
    assert last is not None and last.month == 12 and last.day == 31
    assert calendars.last_session("XSHG") <= last
    assert calendars.data_limits("XNYS") == (None, None)  # holidays from rules: no end
    assert calendars.last_session("XNYS") is None


def test_plan_past_a_calendars_data_says_where_it_ends(write_config, capsys):
    last = calendars.data_limits("XSHG")[1]
    path = write_config(SIGNAL.replace('"XNYS"', '"XSHG"'))
    day = date(last.year + 1, 1, 10)
    code = cli.main(["--config", str(path), "plan", "--from", day.isoformat(), "--to",
                     day.isoformat()])
    err = capsys.readouterr().err
    assert code == 1
    assert f"records XSHG's holidays up to {last} only" in err


def test_windows_are_built_once_per_calendar_and_year_span(write_config, monkeypatch):
    cfg = config.load(write_config(SIGNAL))
    builds = []
    real = calendars._build.__wrapped__

    def counting(canonical, start, end):
        builds.append((canonical, start, end))
        return real(canonical, start, end)

    monkeypatch.setattr(calendars, "_build", calendars.lru_cache(maxsize=8)(counting))
    plan.plan_between(cfg, date(2011, 3, 1), date(2011, 3, 31))
    plan.plan_between(cfg, date(2011, 6, 1), date(2011, 6, 30))
    plan.plan_ahead(cfg, datetime(2011, 9, 1, tzinfo=UTC))
    assert builds == [("XNYS", date(2011, 1, 1), date(2011, 12, 31))]
