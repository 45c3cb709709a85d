"""Session rules (`[job.sessions]`, `extra`) against written-out answers, not the code's output.

The date lists below were written from the exchanges' published holiday calendars (NYSE: Good
Friday 2024-03-29, Thanksgiving, Juneteenth 2026-06-19 on the third Friday of June; LSE: Good
Friday 2024-03-29), not computed by market-timers.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from market_timers import cli
from market_timers.schedule import calendar_checks, plan
from market_timers.schema.problems import ConfigError


def job(rule: str, *, name: str = "rule", calendar: str = "XNYS", extra: str = "") -> str:
    return (f'[[job]]\nname = "{name}"\ncalendar = "{calendar}"\nevent = "close"\n'
            f'offset = "-30min"\ncommand = ["/usr/bin/true"]\n{extra}'
            f"[job.sessions]\n{rule}\n")


def selected(write_config, text: str, start: str = "2024-01-01", end: str = "2026-12-31",
             name: str = "rule") -> list[str]:
    cfg = calendar_checks.load(write_config(text))
    fires = plan.plan_between(cfg, date.fromisoformat(start), date.fromisoformat(end))
    return [f.session.isoformat() for f in fires if f.job == name]


def config_errors(write_config, text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        calendar_checks.load(write_config(text))
    return str(e.value).splitlines()


XNYS_MONTH_ENDS = [
    "2024-01-31", "2024-02-29", "2024-03-28", "2024-04-30", "2024-05-31", "2024-06-28",
    "2024-07-31", "2024-08-30", "2024-09-30", "2024-10-31", "2024-11-29", "2024-12-31",
    "2025-01-31", "2025-02-28", "2025-03-31", "2025-04-30", "2025-05-30", "2025-06-30",
    "2025-07-31", "2025-08-29", "2025-09-30", "2025-10-31", "2025-11-28", "2025-12-31",
    "2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30", "2026-05-29", "2026-06-30",
    "2026-07-31", "2026-08-31", "2026-09-30", "2026-10-30", "2026-11-30", "2026-12-31",
]
# The third-last session of each month (zipline's month_end(days_offset=2)).
XNYS_MONTH_ENDS_MINUS_2 = [
    "2024-01-29", "2024-02-27", "2024-03-26", "2024-04-26", "2024-05-29", "2024-06-26",
    "2024-07-29", "2024-08-28", "2024-09-26", "2024-10-29", "2024-11-26", "2024-12-27",
    "2025-01-29", "2025-02-26", "2025-03-27", "2025-04-28", "2025-05-28", "2025-06-26",
    "2025-07-29", "2025-08-27", "2025-09-26", "2025-10-29", "2025-11-25", "2025-12-29",
    "2026-01-28", "2026-02-25", "2026-03-27", "2026-04-28", "2026-05-27", "2026-06-26",
    "2026-07-29", "2026-08-27", "2026-09-28", "2026-10-28", "2026-11-25", "2026-12-29",
]
XNYS_QUARTERLY_EXPIRIES = [
    "2024-03-15", "2024-06-21", "2024-09-20", "2024-12-20",
    "2025-03-21", "2025-06-20", "2025-09-19", "2025-12-19",
    "2026-03-20", "2026-06-18", "2026-09-18", "2026-12-18",  # 2026-06-19: Juneteenth
]
XLON_QUARTER_ENDS = [
    "2024-03-28", "2024-06-28", "2024-09-30", "2024-12-31",
    "2025-03-31", "2025-06-30", "2025-09-30", "2025-12-31",
    "2026-03-31", "2026-06-30", "2026-09-30", "2026-12-31",
]
XNYS_EARLY_CLOSES = [
    "2024-07-03", "2024-11-29", "2024-12-24", "2025-07-03", "2025-11-28", "2025-12-24",
    "2026-11-27", "2026-12-24",
]


def test_month_end_selects_the_last_xnys_session_of_each_month_2024_2026(write_config):
    text = job('period = "month"\nfrom = "end"')
    assert selected(write_config, text) == XNYS_MONTH_ENDS


def test_month_end_offset_2_selects_the_third_last_session(write_config):
    text = job('period = "month"\nfrom = "end"\noffset = 2')
    assert selected(write_config, text) == XNYS_MONTH_ENDS_MINUS_2


def test_third_friday_of_quarter_months_moves_to_thursday_on_juneteenth_2026(write_config):
    text = job('weekday = "fri"\nnth = 3\nmonths = [3, 6, 9, 12]\nif_closed = "previous"')
    assert selected(write_config, text) == XNYS_QUARTERLY_EXPIRIES


def test_third_friday_if_closed_next_and_none(write_config):
    base = 'weekday = "fri"\nnth = 3\nmonths = [6]\n'
    nxt = selected(write_config, job(base + 'if_closed = "next"'), "2026-01-01", "2026-12-31")
    none = selected(write_config, job(base + 'if_closed = "none"'), "2024-01-01", "2026-12-31")
    assert nxt == ["2026-06-22"]  # Monday after Juneteenth
    assert none == ["2024-06-21", "2025-06-20"]


def test_last_weekday_of_month_with_nth_minus_1(write_config):
    text = job('weekday = "mon"\nnth = -1\nmonths = [5]')
    # Memorial Day is the last Monday of May: closed every year -> the Friday before.
    assert selected(write_config, text) == ["2024-05-24", "2025-05-23", "2026-05-22"]


def test_xlon_quarter_ends_2024_2026(write_config):
    text = job('period = "quarter"\nfrom = "end"', calendar="XLON")
    assert selected(write_config, text) == XLON_QUARTER_ENDS


def test_xnys_early_close_only_and_never(write_config):
    only = selected(write_config, job('early_close = "only"'))
    assert only == XNYS_EARLY_CLOSES
    never = selected(write_config, job('early_close = "never"'), "2025-11-24", "2025-12-31")
    assert "2025-11-28" not in never and "2025-12-24" not in never
    assert "2025-11-26" in never and "2025-12-23" in never and len(never) == 26 - 2


def test_week_start_and_year_start(write_config):
    week = selected(write_config, job('period = "week"\nfrom = "start"'), "2025-11-17",
                    "2026-01-09")
    assert week == ["2025-11-17", "2025-11-24", "2025-12-01", "2025-12-08", "2025-12-15",
                    "2025-12-22", "2025-12-29", "2026-01-05"]
    year = selected(write_config, job('period = "year"\nfrom = "start"\noffset = 1'))
    assert year == ["2024-01-03", "2025-01-03", "2026-01-05"]


def test_first_session_after_and_last_before_a_closure_longer_than_a_weekend(write_config):
    after = selected(write_config, job('after_closure = "only"'), "2025-01-01", "2025-12-31")
    before = selected(write_config, job('before_closure = "only"'), "2025-01-01", "2025-12-31")
    # 2025: closed three days or more in a row around MLK day (Mon 01-20), Presidents' Day
    # (02-17), Good Friday (04-18), Memorial Day (05-26), Independence Day (Fri 07-04) and
    # Labor Day (09-01); a one-day holiday mid-week (Thanksgiving, Christmas) is not one.
    assert after == ["2025-01-21", "2025-02-18", "2025-04-21", "2025-05-27", "2025-07-07",
                     "2025-09-02"]
    assert before == ["2025-01-17", "2025-02-14", "2025-04-17", "2025-05-23", "2025-07-03",
                      "2025-08-29"]


def test_extra_adds_sessions_the_rule_does_not_select(write_config):
    text = job('period = "month"\nfrom = "end"', extra='extra = ["2025-11-14"]\n')
    got = selected(write_config, text, "2025-11-01", "2025-12-31")
    assert got == ["2025-11-14", "2025-11-28", "2025-12-31"]


def test_skip_wins_over_the_rule(write_config):
    text = job('period = "month"\nfrom = "end"', extra='skip = ["2025-11-28"]\n')
    assert selected(write_config, text, "2025-11-01", "2025-12-31") == ["2025-12-31"]


def test_plan_ahead_has_only_the_selected_session_with_why(write_config):
    cfg = calendar_checks.load(write_config(job('period = "month"\nfrom = "end"\noffset = 2')))
    fires = plan.plan_ahead(cfg, datetime(2025, 11, 21, 12, tzinfo=UTC))  # horizon: 21, 24, 25
    assert [(f.session.isoformat(), f.why) for f in fires] == [("2025-11-25", "month end -2")]


def test_periodic_job_follows_the_rule(write_config):
    text = ('[[job]]\nname = "rule"\ncalendar = "XNYS"\nevery = "30min"\n'
            'command = ["/usr/bin/true"]\n[job.sessions]\nperiod = "month"\nfrom = "end"\n')
    assert selected(write_config, text, "2025-11-01", "2025-12-31") == ["2025-11-28",
                                                                          "2025-12-31"]


def test_plan_table_and_summary_say_why_a_session_is_selected(write_config, capsys):
    path = write_config(job('weekday = "fri"\nnth = 3\nmonths = [6]'))
    assert cli.main(["--config", str(path), "plan", "--from", "2026-06-01", "--to",
                     "2026-06-30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "2026-06-18" in out[1]
    assert out[1].rstrip().endswith("3rd fri of Jun (2026-06-19 closed: previous session)")
    assert cli.main(["--config", str(path), "plan", "--summary", "--from", "2026-06-01",
                     "--to", "2026-06-30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "3rd fri of Jun" in out[1]  # one line per job: its rule


def test_plan_json_has_the_reason(write_config, capsys):
    import json

    path = write_config(job('period = "month"\nfrom = "end"'))
    assert cli.main(["--config", str(path), "plan", "--json", "--from", "2025-11-01", "--to",
                     "2025-11-30"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(e["session"], e["selected"]) for e in doc] == [("2025-11-28", "month end")]


def test_unit_description_names_the_rule(write_config, tmp_path):
    path = write_config(job('period = "month"\nfrom = "end"'))
    assert cli.main(["--config", str(path), "--now", "2025-11-26T12:00:00Z", "render", "--out",
                     str(tmp_path / "out")]) == 0
    timers = sorted(p.name for p in (tmp_path / "out").glob("*.timer"))
    assert timers == ["market-rule@2025-11-28-173000.timer"]
    text = (tmp_path / "out" / timers[0]).read_text()
    assert "Description=market-timers rule XNYS 2025-11-28 close -30min at 12:30 EST " \
           "(month end)" in text


# validation ---------------------------------------------------------------------------------

def test_period_and_weekday_together_is_an_error_naming_both_keys(write_config):
    errors = config_errors(write_config, job('period = "month"\nweekday = "fri"\nnth = 3'))
    assert any("job.rule.sessions.weekday" in e and "sessions.period" in e for e in errors)


def test_keys_of_the_other_rule_are_errors(write_config):
    errors = config_errors(write_config, job('period = "month"\nnth = 3\nif_closed = "next"'))
    assert any("job.rule.sessions.nth" in e and "weekday" in e for e in errors)
    assert any("job.rule.sessions.if_closed" in e for e in errors)
    errors = config_errors(write_config, job('weekday = "fri"\nnth = 3\noffset = 1'))
    assert any("job.rule.sessions.offset" in e and "period" in e for e in errors)


def test_bad_values_name_file_key_and_value(write_config):
    errors = config_errors(write_config, job('period = "fortnight"'))
    assert any(e.endswith("(got 'fortnight')") and "job.rule.sessions.period" in e
               and "market-timers.toml" in e for e in errors)
    errors = config_errors(write_config, job('weekday = "fri"\nnth = 6'))
    assert any("job.rule.sessions.nth" in e and "(got 6)" in e for e in errors)
    errors = config_errors(write_config, job('weekday = "fri"\nnth = 1\nmonths = [13]'))
    assert any("job.rule.sessions.months[0]" in e and "(got 13)" in e for e in errors)
    errors = config_errors(write_config, job('early_close = "sometimes"'))
    assert any("job.rule.sessions.early_close" in e for e in errors)
    errors = config_errors(write_config, job('color = "red"'))
    assert any("job.rule.sessions.color: unknown key" in e for e in errors)
    errors = config_errors(write_config, job('weekday = "fri"'))
    assert any("job.rule.sessions.nth" in e for e in errors)


def test_extra_must_be_sessions_and_not_also_skipped(write_config):
    errors = config_errors(write_config, job('period = "month"', extra='extra = ["2025-11-27"]\n'))
    assert any("job.rule.extra" in e and "not a session of XNYS" in e and "2025-11-27" in e
               for e in errors)
    errors = config_errors(write_config, job(
        'period = "month"', extra='extra = ["2025-11-26"]\nskip = ["2025-11-26"]\n'))
    assert any("job.rule.extra" in e and "skip" in e for e in errors)


def test_rule_on_a_fixed_time_job_is_an_error(write_config):
    text = ('[[job]]\nname = "nightly"\nat = "02:30 UTC"\ncommand = ["/usr/bin/true"]\n'
            '[job.sessions]\nperiod = "month"\n')
    errors = config_errors(write_config, text)
    assert any("job.nightly.sessions" in e and "at" in e for e in errors)


def test_a_rule_that_selects_nothing_in_a_year_is_a_warning_naming_it(write_config, capsys):
    from market_timers.schedule import selection

    cfg = calendar_checks.load(write_config(job('break = "only"')))  # XNYS has no break
    now = datetime(2025, 11, 20, 12, tzinfo=UTC)
    warnings = selection.warnings(cfg, now)
    assert len(warnings) == 1
    assert "job.rule.sessions" in warnings[0] and "break only" in warnings[0]
    assert "no session" in warnings[0]
    cfg = calendar_checks.load(write_config(job('period = "month"')))
    assert selection.warnings(cfg, now) == []


def test_plan_prints_the_warning_on_stderr(write_config, capsys):
    path = write_config(job('weekday = "fri"\nnth = 5\nmonths = [2]'))  # Feb 2027 has 4
    assert cli.main(["--config", str(path), "--now", "2026-03-01T12:00:00Z", "plan"]) == 0
    err = capsys.readouterr().err
    assert "warning: job.rule.sessions" in err and "5th fri of Feb" in err


def test_run_by_hand_on_a_session_the_rule_does_not_choose_says_so(write_config, capsys,
                                                                   tmp_path):
    from market_timers.controls import manual_run

    cfg = calendar_checks.load(write_config(job('period = "month"')))
    assert manual_run.command(cfg, "rule", date(2025, 11, 26), False,
                              now=datetime(2025, 11, 26, 12, tzinfo=UTC), systemctl=object(),
                              unit_dir=tmp_path / "run-units") != 0
    assert "not chosen by its [job.sessions] rule" in capsys.readouterr().err


def test_refresh_words_a_rule_whose_chosen_session_moved(write_config):
    """A holiday the exchange adds (an override here) moves the month end -2 of November 2025
    from the 25th to the 24th: the refresh's change line says the rule moved it, and where."""
    from market_timers.schedule.syncreport import Change
    from market_timers.watch.changes import describe_changes

    text = job('period = "month"\noffset = 2') + '[overrides.XNYS]\nclosed = ["2025-11-26"]\n'
    cfg = calendar_checks.load(write_config(text))
    lines = describe_changes(cfg, [Change("rule", "2025-11-25", "2025-11-25T20:30:00Z", None,
                                          "XNYS")])
    assert lines == [("XNYS", "2025-11-25", "XNYS 2025-11-25: rule no longer chosen by its "
                      "session rule (month end -2; now 2025-11-24) (was due "
                      "2025-11-25T20:30:00Z)")]
