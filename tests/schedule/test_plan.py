"""The plan against independent answers: the seed's published table and hand-checked instants."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from market_timers import cli
from market_timers.config import loader as config
from market_timers.schedule import plan

SIGNAL = """
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""


def fires(write_config, text, start, end):
    cfg = config.load(write_config(text))
    return plan.plan_between(cfg, date.fromisoformat(start), date.fromisoformat(end))


def test_seed_table_xnys_close_minus_15_has_85_fires_all_on_time(write_config):
    got = fires(write_config, 'calendar = "XNYS"\n' + SIGNAL, "2025-09-02", "2025-12-31")
    assert len(got) == 85  # the seed: 85 sessions, a calendar-driven trigger right 85 of 85
    by_day = {f.session.isoformat(): f.fire_iso for f in got}
    # The seed: a UTC cron at 19:45 is right 44 times (EDT, up to 2025-10-31), then 20:45 UTC...
    assert sum(v.endswith("19:45:00Z") for v in by_day.values()) == 44
    assert sum(v.endswith("20:45:00Z") for v in by_day.values()) == 85 - 44 - 2
    assert by_day["2025-10-31"] == "2025-10-31T19:45:00Z"
    assert by_day["2025-11-03"] == "2025-11-03T20:45:00Z"
    # ...and the two early closes at 13:00 New York: 12:45 EST = 17:45 UTC.
    assert by_day["2025-11-28"] == "2025-11-28T17:45:00Z"
    assert by_day["2025-12-24"] == "2025-12-24T17:45:00Z"
    assert "2025-11-27" not in by_day and "2025-12-25" not in by_day  # holidays


def test_thanksgiving_week_matches_the_seed_simulation(write_config):
    text = 'calendar = "XNYS"\n' + SIGNAL + """
[[job]]
name = "reconcile"
event = "open"
offset = "-30min"
command = ["/usr/bin/true"]
[[job]]
name = "report"
event = "close"
offset = "+30min"
command = ["/usr/bin/true"]
"""
    got = fires(write_config, text, "2025-11-24", "2025-11-28")
    local = [(f.local().strftime("%a %d-%m %H:%M"), f.job) for f in got]
    # The seed's table of 12 tasks in four sessions, New York time.
    assert local == [
        ("Mon 24-11 09:00", "reconcile"), ("Mon 24-11 15:45", "signal"),
        ("Mon 24-11 16:30", "report"),
        ("Tue 25-11 09:00", "reconcile"), ("Tue 25-11 15:45", "signal"),
        ("Tue 25-11 16:30", "report"),
        ("Wed 26-11 09:00", "reconcile"), ("Wed 26-11 15:45", "signal"),
        ("Wed 26-11 16:30", "report"),
        ("Fri 28-11 09:00", "reconcile"), ("Fri 28-11 12:45", "signal"),
        ("Fri 28-11 13:30", "report"),
    ]


def test_eu_and_us_dst_change_on_different_weeks(write_config):
    """XNYS moves in UTC on 2025-11-03 (US), XLON on 2025-10-27 (EU)."""
    text = SIGNAL.replace('offset = "-15min"', 'offset = "-15min"\ncalendar = "XLON"') + \
        SIGNAL.replace('"signal"', '"ny"').replace('offset = "-15min"',
                                                 'offset = "-15min"\ncalendar = "XNYS"')
    got = fires(write_config, text, "2025-10-24", "2025-11-04")
    lon = {f.session.isoformat(): f.fire_iso[11:16] for f in got if f.job == "signal"}
    ny = {f.session.isoformat(): f.fire_iso[11:16] for f in got if f.job == "ny"}
    assert lon["2025-10-24"] == "15:15" and lon["2025-10-27"] == "16:15"  # BST -> GMT
    assert ny["2025-10-31"] == "19:45" and ny["2025-11-03"] == "20:45"  # EDT -> EST
    assert ny["2025-10-27"] == "19:45"  # US not yet changed in the EU's week


def test_break_events_fire_only_on_sessions_with_a_break(write_config):
    text = 'calendar = "XHKG"\n' + SIGNAL.replace('"close"', '"break_start"').replace(
        '"-15min"', '"+0s"')
    got = {f.session.isoformat(): f.fire_iso for f in fires(write_config, text, "2025-12-22",
                                                             "2025-12-24")}
    # HKEX lunch break 12:00-13:00 HKT = 04:00 UTC; 2025-12-24 is a half day without a break.
    assert got == {"2025-12-22": "2025-12-22T04:00:00Z", "2025-12-23": "2025-12-23T04:00:00Z"}


def test_overnight_session_keeps_its_label_and_fires_the_day_before(write_config):
    text = 'calendar = "CMES"\n' + SIGNAL.replace('"close"', '"open"').replace('"-15min"',
                                                                              '"-5min"')
    [f] = fires(write_config, text, "2025-12-02", "2025-12-02")
    # CME Globex opens at 17:00 Chicago the evening before: 2025-12-01 23:00 UTC.
    assert f.session == date(2025, 12, 2) and f.fire_iso == "2025-12-01T22:55:00Z"
    assert f.unit_stem == "market-signal@2025-12-02-225500"


def test_skip_dates_and_manual_overrides_apply(write_config):
    text = 'calendar = "XNYS"\n' + SIGNAL + 'skip = [2025-12-19]\n' + """
[overrides.XNYS]
closed = ["2025-12-22"]
early_close = { "2025-12-23" = "13:00" }
"""
    got = {f.session.isoformat(): f.fire_iso for f in fires(write_config, text, "2025-12-18",
                                                             "2025-12-23")}
    assert got == {"2025-12-18": "2025-12-18T20:45:00Z", "2025-12-23": "2025-12-23T17:45:00Z"}


def test_plan_ahead_starts_now_and_spans_the_horizon(write_config):
    cfg = config.load(write_config('calendar = "XNYS"\nhorizon = 3\n' + SIGNAL))
    now = datetime(2025, 11, 26, 21, 0, tzinfo=UTC)  # after Wednesday's signal
    assert [f.fire_iso for f in plan.plan_ahead(cfg, now)] == [
        "2025-11-28T17:45:00Z", "2025-12-01T20:45:00Z", "2025-12-02T20:45:00Z"]


def test_cli_plan_json_has_the_documented_fields(write_config, capsys):
    path = write_config('calendar = "XNYS"\n' + SIGNAL)
    assert cli.main(["--config", str(path), "plan", "--from", "2025-11-28", "--to",
                     "2025-11-28", "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert {k: entry[k] for k in ("job", "calendar", "session", "event", "fire_utc")} == {
        "job": "signal", "calendar": "XNYS", "session": "2025-11-28", "event": "close",
        "fire_utc": "2025-11-28T17:45:00Z"}


def test_cli_plan_table_shows_utc_and_exchange_local_time(write_config, capsys):
    path = write_config('calendar = "XNYS"\n' + SIGNAL)
    assert cli.main(["--config", str(path), "plan", "--from", "2025-11-26", "--to",
                     "2025-11-28"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["JOB", "CALENDAR", "SESSION", "EVENT", "UTC", "EXCHANGE", "LOCAL"]
    assert out[-1].split() == ["signal", "XNYS", "2025-11-28", "close", "-15min", "Fri",
                               "2025-11-28", "17:45:00", "Fri", "12:45:00", "EST"]
    assert len(out) == 3  # header + Wednesday + Friday: no Thanksgiving


def test_daily_utc_job_is_planned_every_day_under_one_unit(write_config):
    text = """
[[job]]
name = "nightly"
at = "02:30 UTC"
command = ["/usr/bin/true"]
"""
    got = fires(write_config, text, "2025-03-29", "2025-03-31")
    # A fixed UTC time does not move when Europe changes its clocks on 2025-03-30.
    assert [f.fire_iso for f in got] == ["2025-03-29T02:30:00Z", "2025-03-30T02:30:00Z",
                                         "2025-03-31T02:30:00Z"]
    assert {f.unit_stem for f in got} == {"market-nightly@daily"}


DIGEST_ALERTS = """
[alerts]
digest_offset_minutes = 45
[alerts.email]
host = "127.0.0.1"
from = "market-timers@example.org"
to = ["ops@example.org"]
"""


def test_email_digest_is_planned_after_each_close(write_config):
    got = fires(write_config, 'calendar = "XNYS"\n' + SIGNAL + DIGEST_ALERTS, "2025-11-28",
                "2025-11-28")
    assert [(f.job, f.fire_iso) for f in got] == [("signal", "2025-11-28T17:45:00Z"),
                                                  ("digest", "2025-11-28T18:45:00Z")]


def test_job_named_digest_is_refused_when_the_digest_is_built_in(write_config):
    import pytest

    from market_timers.schema.problems import ConfigError

    text = 'calendar = "XNYS"\n' + SIGNAL.replace('"signal"', '"digest"') + DIGEST_ALERTS
    with pytest.raises(ConfigError, match="reserved for the session digest"):
        config.load(write_config(text))


def test_plan_ahead_after_the_last_session_a_calendars_data_holds_is_a_failure_naming_it(
        write_config):
    # XSHG's holidays are yearly tables: exchange_calendars says where they end. On that last
    # day, after its close, no session is known: the plan says so (sync keeps the calendar's
    # timers, refresh alerts), it is never just empty.
    from datetime import time, timedelta

    from market_timers.schedule import calendars

    last = calendars.data_limits("XSHG")[1]
    assert last is not None
    cfg = config.load(write_config('calendar = "XSHG"\n' + SIGNAL))
    for now in (datetime.combine(last, time(20), UTC),
                datetime.combine(last + timedelta(days=3), time(1), UTC)):
        result = plan.plan_ahead_partial(cfg, now)
        assert result.fires == []
        [failure] = result.failures
        assert failure.calendar == "XSHG" and failure.jobs == ("signal",)
        assert f"holidays up to {last} only" in failure.reason
        assert f"no session after {now:%Y-%m-%d %H:%M} UTC" in failure.reason
    # the same morning, before that close, the day's session is still planned
    morning = plan.plan_ahead_partial(cfg, datetime.combine(last, time(1), UTC))
    assert morning.failures == [] and [f.session for f in morning.fires] == [last]


def test_plan_job_shows_only_that_job_and_an_unknown_name_is_named(write_config, capsys):
    from market_timers import cli

    path = write_config('calendar = "XNYS"\n[[job]]\nname = "signal"\nevent = "close"\n'
                        'offset = "-15min"\ncommand = ["/bin/true"]\n[[job]]\nname = "orders"\n'
                        'event = "close"\noffset = "-10min"\ncommand = ["/bin/true"]\n')
    assert cli.main(["--config", str(path), "plan", "--job", "signal", "--from", "2026-11-25",
                     "--to", "2026-11-27"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    # Thanksgiving 11-26 closed; 11-27 closes at 13:00 New York (18:00 UTC)
    assert [line.split()[:3] for line in lines] == [["signal", "XNYS", "2026-11-25"],
                                                    ["signal", "XNYS", "2026-11-27"]]
    assert "17:45:00" in lines[1]
    assert cli.main(["--config", str(path), "plan", "--job", "signl"]) == 2
    assert "--job signl: no such job in the config; did you mean signal?" in \
        capsys.readouterr().err
