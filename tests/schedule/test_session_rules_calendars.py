"""Jobs on several exchanges (`calendars`, `open_on`, `event_from`) against written-out answers.

Both New York and London: the NYSE closes on Christmas, New Year's Day and Good Friday and is open
on Boxing Day and Easter Monday; the LSE closes on all of those (Boxing Day 2026 falls on a
Saturday: the LSE closes on Monday 2026-12-28 instead). Both close early on Christmas Eve (NYSE
13:00 New York, LSE 12:30 London), the LSE also on New Year's Eve.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from market_timers import cli
from market_timers.schedule import calendar_checks, plan
from market_timers.schema.problems import ConfigError


def job(keys: str = "", rule: str = "", event: str = "close", offset: str = "-10min") -> str:
    text = (f'[[job]]\nname = "fx"\ncalendars = ["XNYS", "XLON"]\nevent = "{event}"\n'
            f'offset = "{offset}"\ncommand = ["/usr/bin/true"]\n{keys}')
    return text + (f"[job.sessions]\n{rule}\n" if rule else "")


def fires(write_config, text: str, start: str, end: str):
    cfg = calendar_checks.load(write_config(text))
    return plan.plan_between(cfg, date.fromisoformat(start), date.fromisoformat(end))


def days(write_config, text: str, start: str, end: str) -> list[str]:
    return [f.session.isoformat() for f in fires(write_config, text, start, end)]


def errors(write_config, text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        calendar_checks.load(write_config(text))
    return str(e.value).splitlines()


BOTH_CHRISTMAS_2024 = ["2024-12-23", "2024-12-24", "2024-12-27", "2024-12-30", "2024-12-31",
                       "2025-01-02"]
BOTH_CHRISTMAS_2025 = ["2025-12-22", "2025-12-23", "2025-12-24", "2025-12-29", "2025-12-30",
                       "2025-12-31", "2026-01-02"]
BOTH_CHRISTMAS_2026 = ["2026-12-21", "2026-12-22", "2026-12-23", "2026-12-24", "2026-12-29",
                       "2026-12-30", "2026-12-31", "2027-01-04"]
BOTH_EASTER_2024 = ["2024-03-25", "2024-03-26", "2024-03-27", "2024-03-28", "2024-04-02",
                    "2024-04-03", "2024-04-04", "2024-04-05"]
BOTH_EASTER_2025 = ["2025-04-14", "2025-04-15", "2025-04-16", "2025-04-17", "2025-04-22",
                    "2025-04-23", "2025-04-24", "2025-04-25"]
BOTH_EASTER_2026 = ["2026-03-30", "2026-03-31", "2026-04-01", "2026-04-02", "2026-04-07",
                    "2026-04-08", "2026-04-09", "2026-04-10"]


@pytest.mark.parametrize(("start", "end", "want"), [
    ("2024-12-23", "2025-01-02", BOTH_CHRISTMAS_2024),
    ("2025-12-22", "2026-01-02", BOTH_CHRISTMAS_2025),
    ("2026-12-21", "2027-01-04", BOTH_CHRISTMAS_2026),
    ("2024-03-25", "2024-04-05", BOTH_EASTER_2024),
    ("2025-04-14", "2025-04-25", BOTH_EASTER_2025),
    ("2026-03-30", "2026-04-10", BOTH_EASTER_2026),
])
def test_both_open_around_christmas_and_easter(write_config, start, end, want):
    assert days(write_config, job(), start, end) == want


def test_any_open_adds_the_days_only_one_exchange_trades(write_config):
    got = days(write_config, job('open_on = "any"\n'), "2025-12-22", "2026-01-02")
    assert got == ["2025-12-22", "2025-12-23", "2025-12-24", "2025-12-26", "2025-12-29",
                   "2025-12-30", "2025-12-31", "2026-01-02"]
    easter = days(write_config, job('open_on = "any"\n'), "2025-04-18", "2025-04-21")
    assert easter == ["2025-04-21"]  # Easter Monday: New York only


def test_earliest_and_latest_close_and_a_named_calendar(write_config):
    def at(keys: str) -> dict[str, tuple[str, str]]:
        return {f.session.isoformat(): (f.calendar, f.fire_iso)
                for f in fires(write_config, job(keys), "2025-12-22", "2025-12-24")}

    # 10 min before the first of the two closes: London's, 16:30 GMT; on Christmas Eve 12:30.
    assert at('event_from = "earliest"\n') == {
        "2025-12-22": ("XLON", "2025-12-22T16:20:00Z"), "2025-12-23": ("XLON", "2025-12-23T16:20:00Z"),
        "2025-12-24": ("XLON", "2025-12-24T12:20:00Z")}
    assert at('event_from = "latest"\n') == {
        "2025-12-22": ("XNYS", "2025-12-22T20:50:00Z"), "2025-12-23": ("XNYS", "2025-12-23T20:50:00Z"),
        "2025-12-24": ("XNYS", "2025-12-24T17:50:00Z")}
    assert at("") == at('event_from = "XNYS"\n')  # default: the first calendar
    assert {c for c, _ in at('event_from = "XLON"\n').values()} == {"XLON"}


def test_any_open_takes_the_event_of_the_exchange_that_is_open(write_config):
    got = {f.session.isoformat(): (f.calendar, f.fire_iso) for f in fires(
        write_config, job('open_on = "any"\nevent_from = "earliest"\n'), "2025-12-26",
        "2025-12-26")}
    assert got == {"2025-12-26": ("XNYS", "2025-12-26T20:50:00Z")}


def test_session_rule_on_the_days_both_are_open(write_config):
    # The last day of March 2024 both trade: Good Friday (03-29) closes both -> 03-28.
    got = days(write_config, job(rule='period = "month"'), "2024-03-01", "2024-04-30")
    assert got == ["2024-03-28", "2024-04-30"]
    # The first day of January 2026 both trade: 01-02.
    got = days(write_config, job(rule='period = "month"\nfrom = "start"'), "2026-01-01",
               "2026-01-31")
    assert got == ["2026-01-02"]


def test_unit_and_context_say_which_calendar_decided(write_config, tmp_path):
    path = write_config(job('event_from = "earliest"\n'))
    assert cli.main(["--config", str(path), "--now", "2025-12-23T12:00:00Z", "render", "--out",
                     str(tmp_path / "out")]) == 0
    unit = (tmp_path / "out" / "market-fx@2025-12-24-122000.service").read_text()
    assert "Description=market-timers job fx XLON 2025-12-24 close -10min at 12:20 GMT " \
           "(XNYS+XLON open, earliest close: XLON)" in unit
    assert "Environment=MARKET_CALENDAR=XLON" in unit
    assert "Environment=MARKET_CALENDARS=XNYS,XLON" in unit


def test_plan_why_names_the_deciding_calendar(write_config, capsys):
    path = write_config(job('open_on = "any"\nevent_from = "latest"\n'))
    assert cli.main(["--config", str(path), "plan", "--from", "2025-12-26", "--to",
                     "2025-12-26"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].rstrip().endswith("XNYS or XLON open, latest close: XNYS")


def test_plan_ahead_of_a_two_calendar_job(write_config):
    cfg = calendar_checks.load(write_config(job()))
    got = plan.plan_ahead(cfg, datetime(2025, 12, 23, 22, tzinfo=UTC), horizon=3)
    assert [f.session.isoformat() for f in got] == ["2025-12-24", "2025-12-29", "2025-12-30"]


# validation ---------------------------------------------------------------------------------

def test_calendar_and_calendars_together_is_an_error_naming_both(write_config):
    text = job().replace('calendars = ["XNYS", "XLON"]\n',
                         'calendars = ["XNYS", "XLON"]\ncalendar = "XNYS"\n')
    assert any("job.fx.calendars" in e and "calendar" in e for e in errors(write_config, text))


def test_named_calendar_with_any_open_is_an_error_naming_both_keys(write_config):
    got = errors(write_config, job('open_on = "any"\nevent_from = "XNYS"\n'))
    assert any("job.fx.event_from" in e and "open_on" in e for e in got)


def test_bad_calendars_values(write_config):
    got = errors(write_config, job().replace('["XNYS", "XLON"]', '["XNYS"]'))
    assert any("job.fx.calendars" in e and "at least two" in e for e in got)
    got = errors(write_config, job().replace('["XNYS", "XLON"]', '["XNYS", "XNYZ"]'))
    assert any("job.fx.calendars" in e and "XNYZ" in e for e in got)
    got = errors(write_config, job('event_from = "XHKG"\n'))
    assert any("job.fx.event_from" in e and "XHKG" in e for e in got)
    got = errors(write_config, job('open_on = "most"\n'))
    assert any("job.fx.open_on" in e and "(got 'most')" in e for e in got)
    got = errors(write_config, job().replace('calendars = ["XNYS", "XLON"]\n', "")
                 + 'open_on = "all"\n')
    assert any("job.fx.open_on" in e and "calendars" in e for e in got)


def test_extra_on_two_calendars_must_be_a_day_both_trade(write_config):
    got = errors(write_config, job('extra = ["2025-12-26"]\n'))  # LSE: Boxing Day
    assert any("job.fx.extra" in e and "XNYS and XLON" in e and "2025-12-26" in e for e in got)
    assert days(write_config, job('open_on = "any"\nextra = ["2025-12-26"]\n',
                                  rule='period = "month"'), "2025-12-01", "2025-12-31") == [
        "2025-12-26", "2025-12-31"]
