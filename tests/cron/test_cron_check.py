"""check-cron: a cron line against the exchange calendar, counted the way the seed counted.

The expected figures are the seed's published table (seeds/002, "Con el calendario de
exchange_calendars ... se puede contar"), not outputs of our code:

                       disparos  a su hora  sin sesión  a otra hora
cron UTC 19:45               87         44           2           41
cron Madrid 21:45            87         78           2            7
cron Nueva York 15:45        87         83           2            2
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime, timedelta

import pytest

from market_timers.cron.check import check_cron, command
from market_timers.cron.report import format_text, to_json

SEED_FROM, SEED_TO = date(2025, 9, 2), date(2025, 12, 31)
CLOSE_MINUS_15 = -15 * 60


def seed_check(expr: str, tz: str):
    return check_cron(expr, tz, "XNYS", "close", CLOSE_MINUS_15, SEED_FROM, SEED_TO)


def counts(result) -> dict:
    d = to_json(result)
    return {k: d[k] for k in ("fires", "on_time", "no_session", "other_time")}


def wrong_dates(result, kind: str | None = None) -> list[date]:
    return [w.fire_local.date() for w in result.wrong if kind is None or w.kind == kind]


def utc_weekday_dates(result) -> list[date]:
    return [w.fire_utc.date() for w in result.wrong]


# --- the seed's table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "tz", "expected"),
    [
        ("45 15 * * 1-5", "America/New_York",
         {"fires": 87, "on_time": 83, "no_session": 2, "other_time": 2}),
        ("45 19 * * 1-5", "UTC",
         {"fires": 87, "on_time": 44, "no_session": 2, "other_time": 41}),
        ("45 21 * * 1-5", "Europe/Madrid",
         {"fires": 87, "on_time": 78, "no_session": 2, "other_time": 7}),
    ],
    ids=["new_york_1545", "utc_1945", "madrid_2145"],
)
def test_seed_cron_line_against_xnys_close_minus_15_gives_seed_counts(expr, tz, expected):
    assert counts(seed_check(expr, tz)) == expected


def test_new_york_line_misses_thanksgiving_and_christmas_as_no_session():
    r = seed_check("45 15 * * 1-5", "America/New_York")
    assert wrong_dates(r, "no_session") == [date(2025, 11, 27), date(2025, 12, 25)]


def test_new_york_line_fires_at_other_time_on_the_two_early_closes():
    r = seed_check("45 15 * * 1-5", "America/New_York")
    assert wrong_dates(r, "other_time") == [date(2025, 11, 28), date(2025, 12, 24)]
    for w in (w for w in r.wrong if w.kind == "other_time"):
        assert w.expected_utc == datetime(w.session.year, w.session.month, w.session.day,
                                          17, 45, tzinfo=UTC)


def test_madrid_line_is_late_in_the_week_europe_changed_clocks_before_us():
    r = seed_check("45 21 * * 1-5", "Europe/Madrid")
    eu_week = [date(2025, 10, d) for d in range(27, 32)]
    assert [d for d in wrong_dates(r, "other_time") if d in eu_week] == eu_week


def test_text_output_lists_each_wrong_fire_in_utc_and_exchange_local_with_calendar_verdict():
    text = format_text(seed_check("45 15 * * 1-5", "America/New_York"))
    assert "fires: 87  on time: 83  no session: 2  other time: 2" in text
    assert ("2025-11-28 20:45 UTC = Fri 2025-11-28 15:45 EST: session closes 13:00 EST; "
            "fire should be 12:45 EST (17:45 UTC)") in text
    assert "2025-12-25 20:45 UTC = Thu 2025-12-25 15:45 EST: no session (holiday/weekend)" in text


def test_json_output_has_counts_and_wrong_fires_in_utc_z_form():
    d = to_json(seed_check("45 15 * * 1-5", "America/New_York"))
    assert d["calendar"] == "XNYS" and d["offset"] == "-15min"
    assert [w["fire_utc"] for w in d["wrong_fires"]] == [
        "2025-11-27T20:45:00Z", "2025-11-28T20:45:00Z",
        "2025-12-24T20:45:00Z", "2025-12-25T20:45:00Z",
    ]
    assert d["wrong_fires"][1]["expected_utc"] == "2025-11-28T17:45:00Z"
    json.dumps(d)  # serialisable as is


# --- cron semantics -----------------------------------------------------------------------------


def test_day_of_month_and_day_of_week_both_restricted_fire_on_either():
    # 04:30 UTC is never 15 min before an XNYS close, so every fire is listed as wrong.
    r = check_cron("30 4 1,15 * 5", "UTC", "XNYS", "close", CLOSE_MINUS_15,
                   date(2025, 9, 1), date(2025, 10, 31))
    fired = utc_weekday_dates(r)
    firsts_and_fifteenths = [date(2025, 9, 1), date(2025, 9, 15),
                             date(2025, 10, 1), date(2025, 10, 15)]
    fridays = [date(2025, 9, 5) + timedelta(weeks=n) for n in range(9)]
    assert fired == sorted(firsts_and_fifteenths + fridays)
    assert r.fires == 13


@pytest.mark.parametrize("dow", ["0", "7", "sun"])
def test_day_of_week_zero_seven_and_sun_are_sunday(dow):
    r = check_cron(f"0 12 * * {dow}", "UTC", "XNYS", "close", 0,
                   date(2025, 9, 1), date(2025, 9, 30))
    assert utc_weekday_dates(r) == [date(2025, 9, d) for d in (7, 14, 21, 28)]
    assert r.no_session == 4


def test_one_to_five_is_monday_to_friday_not_tuesday_to_saturday():
    # APScheduler 3's from_crontab reads 1-5 as Tue-Sat (seed); cron reads Mon-Fri.
    r = check_cron("45 15 * * 1-5", "America/New_York", "XNYS", "close", CLOSE_MINUS_15,
                   date(2025, 11, 1), date(2025, 11, 8))
    assert r.fires == 5 and r.on_time == 5


def test_fire_at_exactly_from_midnight_utc_is_counted_and_to_is_inclusive():
    r = check_cron("0 0 * * *", "UTC", "XNYS", "close", 0, date(2025, 9, 6), date(2025, 9, 7))
    assert r.fires == 2  # 2025-09-06 00:00 and 2025-09-07 00:00 UTC
    r = check_cron("59 23 * * *", "UTC", "XNYS", "close", 0, date(2025, 9, 6), date(2025, 9, 7))
    assert r.fires == 2


def test_calendar_alias_resolves_to_canonical_name():
    assert seed_check("45 15 * * 1-5", "America/New_York").calendar == "XNYS"
    r = check_cron("45 15 * * 1-5", "America/New_York", "NYSE", "close", CLOSE_MINUS_15,
                   SEED_FROM, SEED_TO)
    assert r.calendar == "XNYS" and r.on_time == 83


def test_break_start_on_session_without_break_is_other_time_with_reason():
    # XHKG: lunch break 12:00-13:00 HKT; the half days of 24 and 31 December have none.
    r = check_cron("0 12 * * 1-5", "Asia/Hong_Kong", "XHKG", "break_start", 0,
                   date(2025, 12, 15), date(2025, 12, 31))
    assert wrong_dates(r, "other_time") == [date(2025, 12, 24), date(2025, 12, 31)]
    assert all(w.calendar_says() == "session has no break; no fire is due"
               for w in r.wrong if w.kind == "other_time")
    assert r.on_time == 9


# --- errors -------------------------------------------------------------------------------------

GOOD = dict(expr="45 15 * * 1-5", tz="America/New_York", calendar="XNYS", event="close",
            offset_seconds=CLOSE_MINUS_15, start=SEED_FROM, end=SEED_TO)


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("61 15 * * 1-5", "out of range"),
        ("45 15 * *", "has 4 fields"),
        ("0 45 15 * * 1-5", "has 6 fields"),  # a seconds field is not cron's
        ("H 15 * * 1-5", "minute field 'H'"),  # Jenkins-style hash, not cron's
        ("45 15 L * *", "day of month field 'L'"),
        ("45 15 * * 5#2", "day of week field '5#2'"),
        ("45 15 * * foo", "day of week field 'foo'"),
        ("@reboot", "@reboot"),
        ("", "empty"),
    ],
)
def test_bad_cron_expression_raises_value_error_naming_it(expr, needle):
    with pytest.raises(ValueError, match="cron expression") as e:
        check_cron(**{**GOOD, "expr": expr})
    assert needle in str(e.value)


def test_unknown_time_zone_raises_and_suggests_close_name():
    with pytest.raises(ValueError, match=r"--tz 'America/New_Yrok'.*America/New_York"):
        check_cron(**{**GOOD, "tz": "America/New_Yrok"})


def test_unknown_calendar_raises_and_suggests_close_names_including_aliases():
    with pytest.raises(ValueError, match=r"--calendar 'XNYZ'.*XNYS"):
        check_cron(**{**GOOD, "calendar": "XNYZ"})
    with pytest.raises(ValueError, match=r"--calendar 'nyse'.*NYSE"):
        check_cron(**{**GOOD, "calendar": "nyse"})


def test_unknown_event_raises_naming_the_choices():
    with pytest.raises(ValueError, match=r"--event 'closing'.*open, close, break_start"):
        check_cron(**{**GOOD, "event": "closing"})


@pytest.mark.parametrize("event", ["break_start", "break_end"])
def test_break_event_on_calendar_without_breaks_raises(event):
    with pytest.raises(ValueError, match=rf"--event '{event}': calendar XNYS has no breaks"):
        check_cron(**{**GOOD, "event": event})


def test_from_after_to_raises_naming_both_dates():
    with pytest.raises(ValueError, match=r"--from 2025-12-31 is after --to 2025-09-02"):
        check_cron(**{**GOOD, "start": SEED_TO, "end": SEED_FROM})


# --- command(args) as the CLI calls it ----------------------------------------------------------


def ns(**kw) -> argparse.Namespace:
    base = dict(expr="45 15 * * 1-5", tz="America/New_York", calendar="XNYS", event="close",
                offset="-15min", from_=SEED_FROM, to=SEED_TO, json=False)
    return argparse.Namespace(**{**base, **kw})


def test_command_json_prints_seed_counts_and_returns_zero(capsys):
    assert command(ns(json=True)) == 0
    d = json.loads(capsys.readouterr().out)
    assert {k: d[k] for k in ("fires", "on_time", "no_session", "other_time")} == {
        "fires": 87, "on_time": 83, "no_session": 2, "other_time": 2}


def test_command_text_prints_wrong_fires(capsys):
    assert command(ns()) == 0
    out = capsys.readouterr().out
    assert "wrong fires (4):" in out and "2025-12-24 20:45 UTC" in out


def test_command_without_dates_covers_last_90_days_up_to_today(capsys):
    before = datetime.now(UTC).date()
    assert command(ns(from_=None, to=None, json=True)) == 0
    after = datetime.now(UTC).date()
    d = json.loads(capsys.readouterr().out)
    end = date.fromisoformat(d["to"])
    assert before <= end <= after
    assert date.fromisoformat(d["from"]) == end - timedelta(days=90)


def test_command_bad_offset_raises_value_error_naming_it():
    with pytest.raises(ValueError, match=r"--offset '15M'"):
        command(ns(offset="15M"))


def test_cli_accepts_a_negative_offset_as_a_separate_word(capsys):
    from market_timers import cli

    assert cli.main(["check-cron", "45 15 * * 1-5", "--tz", "America/New_York", "--calendar",
                     "XNYS", "--event", "close", "--offset", "-15min", "--from", "2025-09-02",
                     "--to", "2025-12-31", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["fires"], out["on_time"], out["no_session"], out["other_time"]) == (87, 83, 2, 2)


def test_dst_times_are_counted_as_debians_cron_runs_them():
    """Madrid "30 2 * * *": 02:30 does not exist on 2025-03-30 and happens twice on 2025-10-26.
    Debian's cron runs it once on each day: at the end of the gap (03:00 CEST = 01:00 UTC), and
    at the first 02:30 (CEST = 00:30 UTC). croniter ran the autumn one twice."""
    spring = check_cron("30 2 * * *", "Europe/Madrid", "XMAD", "open", 0,
                        date(2025, 3, 29), date(2025, 3, 31))
    autumn = check_cron("30 2 * * *", "Europe/Madrid", "XMAD", "open", 0,
                        date(2025, 10, 25), date(2025, 10, 27))
    assert spring.fires == 3 and autumn.fires == 3
    sunday = [w.fire_utc for w in spring.wrong if w.fire_utc.date() == date(2025, 3, 30)]
    assert sunday == [datetime(2025, 3, 30, 1, 0, tzinfo=UTC)]
    sunday = [w.fire_utc for w in autumn.wrong if w.fire_utc.date() == date(2025, 10, 26)]
    assert sunday == [datetime(2025, 10, 26, 0, 30, tzinfo=UTC)]


@pytest.mark.parametrize(("macro", "fires"), [("@daily", 3), ("@hourly", 72), ("@weekly", 1)])
def test_macros_are_read_as_cron_reads_them(macro, fires):
    r = check_cron(macro, "UTC", "XNYS", "close", 0, date(2025, 9, 5), date(2025, 9, 7))
    assert r.fires == fires


def test_a_cron_line_against_a_month_end_job_counts_the_sessions_its_rule_does_not_choose(
        write_config, capsys):
    """The usual cron stand-in for "the last business day" ("28-31" and a shell test)
    against a job whose rule is the month's last session: written-out XNYS month ends of 2025
    (Jan 31, Feb 28, Mar 31, Apr 30, May 30, Jun 30, Jul 31, Aug 29, Sep 30, Oct 31, Nov 28 (13:00
    early close), Dec 31)."""
    import json
    from datetime import date, timedelta

    from market_timers import cli

    path = write_config('calendar = "XNYS"\n[[job]]\nname = "rebalance"\nevent = "close"\n'
                        'offset = "-15min"\ncommand = ["/bin/true"]\n'
                        '[job.sessions]\nperiod = "month"\nfrom = "end"\n')
    assert cli.main(["--config", str(path), "check-cron", "45 15 28-31 * *", "--tz",
                     "America/New_York", "--job", "rebalance", "--from", "2025-01-01", "--to",
                     "2025-12-31", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    day, weekdays, weekends = date(2025, 1, 1), 0, 0
    while day.year == 2025:  # plain arithmetic: every day dated 28..31 (no NYSE holiday is)
        if day.day >= 28:
            weekdays += day.weekday() < 5
            weekends += day.weekday() >= 5
        day += timedelta(days=1)
    assert doc["job"] == "rebalance" and doc["fires"] == weekdays + weekends == 41
    assert (doc["on_time"], doc["other_time"], doc["no_session"]) == (11, 1, weekends)
    assert doc["not_chosen"] == weekdays - 12
    [late] = [w for w in doc["wrong_fires"] if w["kind"] == "other_time"]
    assert late["session"] == "2025-11-28" and late["expected_utc"] == "2025-11-28T17:45:00Z"
    assert all("month end" in w["calendar_says"] for w in doc["wrong_fires"]
               if w["kind"] == "not_chosen")


def test_check_cron_job_refuses_its_own_calendar_flags_and_unknown_jobs(write_config, capsys):
    from market_timers import cli

    path = write_config('calendar = "XNYS"\n[[job]]\nname = "signal"\nevent = "close"\n'
                        'command = ["/bin/true"]\n')
    assert cli.main(["--config", str(path), "check-cron", "45 15 * * 1-5", "--job", "signl"]) == 2
    assert "--job signl: no such job" in capsys.readouterr().err
    assert cli.main(["--config", str(path), "check-cron", "45 15 * * 1-5", "--job", "signal",
                     "--calendar", "XNYS"]) == 2
    assert "leave out --calendar" in capsys.readouterr().err
    assert cli.main(["--config", str(path.parent / "none.toml"), "check-cron",
                     "45 15 * * 1-5"]) == 2
    assert "--calendar or --job is required (no config" in capsys.readouterr().err
