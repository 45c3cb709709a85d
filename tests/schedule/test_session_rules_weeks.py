"""`period = "week"` on exchanges whose week is not Monday to Friday, the spellings of `weekday`,
and the two orders of a date rule and its attribute filters, against dates written out by hand.

The sessions behind these dates were read from exchange_calendars' published data and reasoned
about week by week:
- TASE (XTAE) traded Sunday to Thursday until Sunday 2026-01-04 and Monday to Friday from
  Monday 2026-01-05. No closure in November or December 2025 (Hanukkah is not one). Rosh
  Hashanah 2025 closed Mon-Wed 09-22..24; Yom Kippur Wed-Thu 10-01..02; Sukkot Mon-Tue
  10-06..07; Simchat Torah Mon-Tue 10-13..14; Passover's first day Sunday 2025-04-13.
- Tadawul (XSAU) trades Sunday to Thursday: Eid al-Fitr closed Thu 2025-03-27 to Wed 04-02 and
  Tue 2026-03-17 to Mon 03-23; Founding Day Sunday 2026-02-22.
- NYSE (XNYS): Thanksgiving Thursday 2025-11-27 closed, Friday 11-28 closes at 13:00, the last
  session of November 2025; Christmas Eve 2025-12-24 closes at 13:00.
- Moscow (XMOS) traded Saturday 2024-04-27 and Mumbai (XBOM) Saturday 2025-02-01, each a
  Saturday of a Monday-to-Friday week.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from market_timers.schedule import calendar_checks, plan
from market_timers.schema.problems import ConfigError

MAN_PAGE = Path(__file__).resolve().parents[2] / "man" / "market-timers.toml.5"


def job(rule: str, calendar: str = "XTAE", extra: str = "") -> str:
    return (f'[[job]]\nname = "weekly"\ncalendar = "{calendar}"\nevent = "close"\n'
            f'offset = "-30min"\ncommand = ["/usr/bin/true"]\n{extra}'
            f"[job.sessions]\n{rule}\n")


def selected(write_config, text: str, start: str, end: str) -> list[str]:
    cfg = calendar_checks.load(write_config(text))
    fires = plan.plan_between(cfg, date.fromisoformat(start), date.fromisoformat(end))
    return [f.session.isoformat() for f in fires]


def errors(write_config, text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        calendar_checks.load(write_config(text))
    return str(e.value).splitlines()


WEEK_END = 'period = "week"'
WEEK_START = 'period = "week"\nfrom = "start"'

# TASE --------------------------------------------------------------------------------------

def test_xtae_weeks_of_november_and_december_2025_end_on_thursday(write_config):
    got = selected(write_config, job(WEEK_END), "2025-11-01", "2025-12-31")
    assert got == ["2025-11-06", "2025-11-13", "2025-11-20", "2025-11-27", "2025-12-04",
                   "2025-12-11", "2025-12-18", "2025-12-25"]


def test_xtae_weeks_of_november_and_december_2025_start_on_sunday(write_config):
    got = selected(write_config, job(WEEK_START), "2025-11-01", "2025-12-31")
    assert got == ["2025-11-02", "2025-11-09", "2025-11-16", "2025-11-23", "2025-11-30",
                   "2025-12-07", "2025-12-14", "2025-12-21", "2025-12-28"]


def test_xtae_week_of_the_switch_holds_sunday_and_monday_to_friday(write_config):
    """Sun 12-28..Thu 01-01 is a Sunday-Thursday week; Sunday 2026-01-04 opens the next one (no
    weekend between it and Monday 01-05), which ends on Friday 01-09: six sessions."""
    window = ("2025-12-28", "2026-01-16")
    assert selected(write_config, job(WEEK_END), *window) == [
        "2026-01-01", "2026-01-09", "2026-01-16"]
    assert selected(write_config, job(WEEK_START), *window) == [
        "2025-12-28", "2026-01-04", "2026-01-12"]
    # the sixth-last session: only the week of the switch has six
    assert selected(write_config, job(WEEK_END + "\noffset = 5"), *window) == ["2026-01-04"]
    assert selected(write_config, job(WEEK_START + "\noffset = 1"), *window) == [
        "2025-12-29", "2026-01-05", "2026-01-13"]


def test_xtae_weeks_around_the_autumn_holidays_2025(write_config):
    window = ("2025-09-21", "2025-10-23")
    # Sun 09-21 and Thu 09-25 (Rosh Hashanah); Sun-Tue 09-28..30 (Yom Kippur); Sun, Wed, Thu
    # 10-05, 10-08, 10-09 (Sukkot); 10-12, 10-15, 10-16 (Simchat Torah); Sun-Thu 10-19..23
    assert selected(write_config, job(WEEK_END), *window) == [
        "2025-09-25", "2025-09-30", "2025-10-09", "2025-10-16", "2025-10-23"]
    assert selected(write_config, job(WEEK_START), *window) == [
        "2025-09-21", "2025-09-28", "2025-10-05", "2025-10-12", "2025-10-19"]


def test_xtae_week_whose_sunday_is_a_holiday_starts_on_monday(write_config):
    window = ("2025-04-06", "2025-04-24")  # Passover: Sunday 04-13 closed
    assert selected(write_config, job(WEEK_START), *window) == [
        "2025-04-06", "2025-04-14", "2025-04-20"]
    assert selected(write_config, job(WEEK_END), *window) == [
        "2025-04-10", "2025-04-17", "2025-04-24"]


# Tadawul -----------------------------------------------------------------------------------

def test_xsau_weeks_around_eid_al_fitr_2025(write_config):
    window = ("2025-03-16", "2025-04-10")
    # Sun-Thu 03-16..20; Sun-Wed 03-23..26; only Thu 04-03; Sun-Thu 04-06..10
    assert selected(write_config, job(WEEK_END, "XSAU"), *window) == [
        "2025-03-20", "2025-03-26", "2025-04-03", "2025-04-10"]
    assert selected(write_config, job(WEEK_START, "XSAU"), *window) == [
        "2025-03-16", "2025-03-23", "2025-04-03", "2025-04-06"]


def test_xsau_weeks_around_founding_day_and_eid_al_fitr_2026(write_config):
    window = ("2026-02-15", "2026-03-26")
    # Founding Day: the week of 02-22 starts on Monday 02-23; Eid: the week of 03-15 ends on
    # Monday 03-16, the next starts on Tuesday 03-24
    assert selected(write_config, job(WEEK_START, "XSAU"), *window) == [
        "2026-02-15", "2026-02-23", "2026-03-01", "2026-03-08", "2026-03-15", "2026-03-24"]
    assert selected(write_config, job(WEEK_END, "XSAU"), *window) == [
        "2026-02-19", "2026-02-26", "2026-03-05", "2026-03-12", "2026-03-16", "2026-03-26"]


# a Saturday traded in a Monday-to-Friday week ----------------------------------------------

@pytest.mark.parametrize(("calendar", "window", "want"), [
    ("XMOS", ("2024-04-15", "2024-05-03"), ["2024-04-19", "2024-04-27", "2024-05-03"]),
    ("XBOM", ("2025-01-20", "2025-02-07"), ["2025-01-24", "2025-02-01", "2025-02-07"]),
])
def test_a_traded_saturday_ends_its_monday_week(write_config, calendar, window, want):
    assert selected(write_config, job(WEEK_END, calendar), *window) == want


def test_a_traded_sunday_ends_its_monday_week_xmos_1999(write_config):
    # Mon 01-04 and Thu 01-07 closed, Sunday 01-10 traded: Tue 01-05 .. Sun 01-10 is one week
    window = ("1999-01-04", "1999-01-15")
    assert selected(write_config, job(WEEK_END, "XMOS"), *window) == ["1999-01-10", "1999-01-15"]
    assert selected(write_config, job(WEEK_START, "XMOS"), *window) == [
        "1999-01-05", "1999-01-11"]


def test_a_week_that_moves_earlier_ends_at_the_old_weekend():
    """Monday to Friday until Friday 2027-01-01, Sunday to Thursday from Sunday 2027-01-03 (no
    exchange has done it yet): weeks start on the Mondays, then on the Sundays."""
    from market_timers.schedule import weeks

    specials = ((None, date(2027, 1, 2), "1111100"),)
    got = weeks.week_starts("1111001", specials, date(2026, 12, 21), date(2027, 1, 17))
    assert got == [date(2026, 12, 21), date(2026, 12, 28), date(2027, 1, 3), date(2027, 1, 10),
                   date(2027, 1, 17)]


# weekday spellings -------------------------------------------------------------------------

THIRD_FRIDAYS_XNYS_2026 = ["2026-03-20", "2026-06-18", "2026-09-18", "2026-12-18"]


@pytest.mark.parametrize("spelled", ["fri", "Fri", "FRI", "friday", "Friday", "FRIDAY"])
def test_weekday_is_its_three_letter_form_or_full_name_in_any_case(write_config, spelled):
    rule = f'weekday = "{spelled}"\nnth = 3\nmonths = [3, 6, 9, 12]'
    assert selected(write_config, job(rule, "XNYS"), "2026-01-01", "2026-12-31") == \
        THIRD_FRIDAYS_XNYS_2026


@pytest.mark.parametrize("spelled", ['"fr"', '"th"', '"thurs"', '"tues"', '"fridays"',
                                     '"fridge"', '""', "5"])
def test_other_weekday_spellings_are_refused_naming_file_key_value_and_the_rule(
        write_config, spelled):
    lines = errors(write_config, job(f"weekday = {spelled}\nnth = 3", "XNYS"))
    line = next(e for e in lines if "job.weekly.sessions.weekday" in e)
    assert "market-timers.toml" in line
    assert f"(got {spelled.strip(chr(34))!r})" in line or f"(got {spelled})" in line
    assert "mon" in line and "monday" in line and "any case" in line


# date rule and attribute filters: the two orders -------------------------------------------

MONTH_END_NO_HALF_DAY = 'period = "month"\nearly_close = "never"'


def test_by_default_the_rule_chooses_first_and_a_filter_then_drops_it(write_config):
    # November 2025's last session, Friday 11-28, closes early: no run in November
    got = selected(write_config, job(MONTH_END_NO_HALF_DAY, "XNYS"), "2025-10-01", "2025-12-31")
    assert got == ["2025-10-31", "2025-12-31"]
    week = 'period = "week"\nearly_close = "never"'  # Thanksgiving week ends on a half day
    got = selected(write_config, job(week, "XNYS"), "2025-11-17", "2025-12-05")
    assert got == ["2025-11-21", "2025-12-05"]


def test_count_among_filtered_chooses_among_the_sessions_the_filters_keep(write_config):
    rule = MONTH_END_NO_HALF_DAY + '\ncount_among = "filtered"'
    got = selected(write_config, job(rule, "XNYS"), "2025-10-01", "2025-12-31")
    assert got == ["2025-10-31", "2025-11-26", "2025-12-31"]
    week = 'period = "week"\nearly_close = "never"\ncount_among = "filtered"'
    got = selected(write_config, job(week, "XNYS"), "2025-11-17", "2025-12-05")
    assert got == ["2025-11-21", "2025-11-26", "2025-12-05"]
    # the last half day of each month: December's is Christmas Eve, October has none
    halves = 'period = "month"\nearly_close = "only"\ncount_among = "filtered"'
    got = selected(write_config, job(halves, "XNYS"), "2025-10-01", "2025-12-31")
    assert got == ["2025-11-28", "2025-12-24"]


def test_count_among_filtered_says_so_in_the_plan_why(write_config):
    rule = MONTH_END_NO_HALF_DAY + '\ncount_among = "filtered"'
    cfg = calendar_checks.load(write_config(job(rule, "XNYS")))
    fires = plan.plan_between(cfg, date(2025, 11, 1), date(2025, 11, 30))
    assert [f.why for f in fires] == ["month end (counted among: no early close)"]


def test_count_among_is_refused_without_period_or_filter_or_with_a_bad_value(write_config):
    lines = errors(write_config, job('early_close = "never"\ncount_among = "filtered"', "XNYS"))
    assert any("job.weekly.sessions.count_among" in e and "period" in e for e in lines)
    lines = errors(write_config, job('period = "month"\ncount_among = "filtered"', "XNYS"))
    assert any("job.weekly.sessions.count_among" in e and "early_close" in e for e in lines)
    lines = errors(write_config, job(MONTH_END_NO_HALF_DAY + '\ncount_among = "kept"', "XNYS"))
    assert any("job.weekly.sessions.count_among" in e and "(got 'kept')" in e for e in lines)


# a date that is no session, said by the weekmask of its date -------------------------------

def test_extra_on_a_friday_before_the_switch_is_a_friday_not_a_holiday(write_config):
    lines = errors(write_config, job(WEEK_END, extra='extra = ["2025-12-26"]\n'))
    assert any("job.weekly.extra" in e and "2025-12-26 is a Friday" in e for e in lines)
    lines = errors(write_config, job(WEEK_END, extra='extra = ["2026-01-11"]\n'))
    assert any("job.weekly.extra" in e and "2026-01-11 is a Sunday" in e for e in lines)


# the man page says it ----------------------------------------------------------------------

def test_the_man_page_states_weeks_spellings_and_the_order_with_its_examples():
    text = MAN_PAGE.read_text().replace("\\-", "-").replace("\\(dq", '"')
    rules = text[text.index(".SS Session rules"):text.index(".SS Refused job keys")]
    for said in ("2026-01-04", "Sunday to Thursday", "monday", "any case", "count_among",
                 "2025-11-28", "2025-11-26"):
        assert said in rules, said
