"""Periodic jobs (`every`) in the plan, against hand-written answers from the exchanges' hours.

Expected instants are written out from published trading hours, not computed with the code under
test: NYSE 09:30-16:00 New York (13:00 on 2026-12-24), EST = UTC-5 until 2027-03-14 02:00, EDT =
UTC-4 after; HKEX 09:30-12:00 and 13:00-16:00 Hong Kong (UTC+8, no DST), a morning-only session on
2026-12-24; CME Globex as exchange_calendars' CMES models it, 17:00 Chicago the day before to 17:00
Chicago (12:00 on 2026-12-24).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest

from market_timers import cli
from market_timers.config import loader as config
from market_timers.schedule import plan
from market_timers.schema.problems import ConfigError

CYCLE = """
calendar = "XNYS"

[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-10min"
command = ["/usr/bin/true"]
grace = "20s"
lock = "orders"
"""


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def minutes(first: str, last: str, step: int = 1) -> list[datetime]:
    """Every `step` minutes from first to last inclusive (a fixture helper, plain arithmetic)."""
    a, b = utc(first), utc(last)
    out = []
    while a <= b:
        out.append(a)
        a += timedelta(minutes=step)
    return out


def fires(write_config, text, start, end):
    cfg = config.load(write_config(text))
    return {f.session.isoformat(): f
            for f in plan.plan_between(cfg, date.fromisoformat(start), date.fromisoformat(end))}


def test_xnys_window_follows_the_early_close_and_skips_the_holiday(write_config):
    got = fires(write_config, CYCLE, "2026-12-23", "2026-12-28")
    assert sorted(got) == ["2026-12-23", "2026-12-24", "2026-12-28"]  # 12-25: Christmas
    # A full day: 09:35 .. 15:50 New York = 14:35 .. 20:50 UTC, 376 slots.
    assert list(got["2026-12-23"].slots) == minutes("2026-12-23 14:35", "2026-12-23 20:50")
    assert len(got["2026-12-23"].slots) == 376
    # The 13:00 early close: the last slot is 12:50 New York = 17:50 UTC.
    assert list(got["2026-12-24"].slots) == minutes("2026-12-24 14:35", "2026-12-24 17:50")
    assert got["2026-12-24"].last_utc == utc("2026-12-24 17:50")


def test_xnys_window_moves_an_hour_in_utc_over_the_us_dst_change(write_config):
    got = fires(write_config, CYCLE, "2027-03-12", "2027-03-15")
    assert list(got["2027-03-12"].slots) == minutes("2027-03-12 14:35", "2027-03-12 20:50")
    assert list(got["2027-03-15"].slots) == minutes("2027-03-15 13:35", "2027-03-15 19:50")


def test_xhkg_lunch_break_pauses_the_slots_by_default(write_config):
    text = CYCLE.replace('calendar = "XNYS"', 'calendar = "XHKG"')
    got = fires(write_config, text, "2026-12-23", "2026-12-24")
    # 09:35 .. 12:00 and 13:00 .. 15:50 Hong Kong: 01:35 .. 04:00 and 05:00 .. 07:50 UTC.
    assert list(got["2026-12-23"].slots) == (minutes("2026-12-23 01:35", "2026-12-23 04:00")
                                             + minutes("2026-12-23 05:00", "2026-12-23 07:50"))
    assert got["2026-12-23"].pause == (utc("2026-12-23 04:00"), utc("2026-12-23 05:00"))
    # Christmas Eve: morning only, closes 12:00 -> the last slot at 11:50 (03:50 UTC).
    assert list(got["2026-12-24"].slots) == minutes("2026-12-24 01:35", "2026-12-24 03:50")


def test_xhkg_during_break_true_keeps_slots_in_the_break(write_config):
    text = CYCLE.replace('calendar = "XNYS"', 'calendar = "XHKG"') + "during_break = true\n"
    got = fires(write_config, text, "2026-12-23", "2026-12-23")
    assert list(got["2026-12-23"].slots) == minutes("2026-12-23 01:35", "2026-12-23 07:50")


def test_cmes_overnight_session_crosses_midnight_utc_and_follows_dst(write_config):
    text = """
calendar = "CMES"
[[job]]
name = "futures"
every = "15min"
until = "close-1h"
command = ["/usr/bin/true"]
"""
    got = fires(write_config, text, "2027-03-12", "2027-03-15")
    # 17:00 CST Thursday (23:00 UTC) .. 16:00 CST Friday (22:00 UTC): 93 slots.
    assert list(got["2027-03-12"].slots) == minutes("2027-03-11 23:00", "2027-03-12 22:00", 15)
    # After the change (Sunday 03-14 02:00): 17:00 CDT Sunday = 22:00 UTC .. 16:00 CDT = 21:00.
    assert list(got["2027-03-15"].slots) == minutes("2027-03-14 22:00", "2027-03-15 21:00", 15)
    assert len(got["2027-03-15"].slots) == 93


def test_slots_are_aligned_to_the_window_start_not_to_the_clock(write_config):
    text = CYCLE.replace('every = "1min"', 'every = "15min"').replace("open+5min", "open+7min")
    got = fires(write_config, text, "2026-12-23", "2026-12-23")
    slots = got["2026-12-23"].slots
    assert slots[:3] == (utc("2026-12-23 14:37"), utc("2026-12-23 14:52"),
                         utc("2026-12-23 15:07"))
    assert slots[-1] == utc("2026-12-23 20:37")  # 20:52 would be after 20:50


def test_an_empty_window_on_an_early_close_day_plans_nothing_that_day(write_config):
    # until = close-4h: 12:00 New York on a normal day, 09:00 on the 13:00 early close, before
    # the 09:30 open: that session has no slot (and no timer).
    text = CYCLE.replace("open+5min", "open").replace("close-10min", "close-4h")
    got = fires(write_config, text, "2026-12-23", "2026-12-24")
    assert "2026-12-24" not in got
    assert got["2026-12-23"].last_utc == utc("2026-12-23 17:00")


def test_plan_json_has_one_entry_per_slot_and_summary_one_line_per_session(
        write_config, capsys):
    path = write_config(CYCLE)
    assert cli.main(["--config", str(path), "plan", "--from", "2026-12-24", "--to", "2026-12-24",
                     "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert len(entries) == 196
    assert entries[0]["slot"] == "2026-12-24T14:35:00Z"
    assert entries[-1]["slot"] == "2026-12-24T17:50:00Z"
    assert {e["unit"] for e in entries} == {entries[0]["unit"]}  # one timer for the session
    assert cli.main(["--config", str(path), "plan", "--from", "2026-12-23", "--to", "2026-12-24",
                     "--summary"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2  # header + the job: its two sessions summed
    assert lines[1].endswith("2 sessions, 572 slots")  # 376 + 196
    assert "09:35-15:50 EST, 09:35-12:50 EST on Thu 2026-12-24" in lines[1]
    assert cli.main(["--config", str(path), "plan", "--from", "2026-12-24", "--to",
                     "2026-12-24", "--slots"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 1 + 196
    assert "Thu 12:50:00 EST" in table[-1]


# Config -----------------------------------------------------------------------------------------

def problems(write_config, job_lines: str) -> list[str]:
    text = 'calendar = "XNYS"\n[[job]]\nname = "cycle"\ncommand = ["/usr/bin/true"]\n' + job_lines
    with pytest.raises(ConfigError) as exc:
        config.load(write_config(text))
    return exc.value.problems.lines()


@pytest.mark.parametrize(("lines", "key", "value"), [
    ('every = "90s"', "every", "90s"),
    ('every = "7s"', "every", "7s"),
    ('every = "0s"', "every", "0s"),
    ('every = "1M"', "every", "1M"),
    ('every = 60', "every", 60),
    ('every = "13h"', "every", "13h"),
    ('every = "1min"\nfrom = "opening+5min"', "from", "opening+5min"),
    ('every = "1min"\nfrom = "open+5"', "from", "open+5"),
    ('every = "1min"\nuntil = "break_end"', "until", "break_end"),
    ('every = "1min"\nfrom = "open+1h"\nuntil = "open+30min"', "until", "open+30min"),
    ('every = "1min"\nduring_break = "no"', "during_break", "no"),
    ('every = "1min"\nstall_after = "30s"', "stall_after", "30s"),
    ('every = "1min"\nstall_after = "-5min"', "stall_after", "-5min"),
    ('every = "1min"\ngrace = "2min"', "grace", "2min"),
    ('every = "1min"\nevent = "close"', "event", "close"),
    ('every = "1min"\nat = "02:30 UTC"', "at", "02:30 UTC"),
    ('event = "close"\nstall_after = "5min"', "stall_after", "5min"),
    ('every = "1min"\nretries = 2', "retries", 2),
])
def test_bad_periodic_keys_name_file_key_and_value(write_config, lines, key, value):
    found = problems(write_config, lines)
    assert any(f": job.cycle.{key}: " in line and line.endswith(f"(got {value!r})")
               for line in found), found
    assert all(line.startswith(str(write_config("")) + ":") or "job.cycle" in line
               for line in found)


def test_periodic_defaults(write_config):
    text = 'calendar = "XNYS"\n[[job]]\nname = "cycle"\ncommand = ["/usr/bin/true"]\n' \
           'every = "1min"\n'
    job = config.load(write_config(text)).job("cycle")
    assert job.periodic.every == 60
    assert (job.periodic.start_event, job.periodic.start_offset) == ("open", 0)
    assert (job.periodic.end_event, job.periodic.end_offset) == ("close", 0)
    assert job.periodic.during_break is False
    assert job.periodic.stall_after == 300  # five periods
    assert job.grace == 30  # half a period
    assert (job.event, job.offset) == ("open", 0)


# The session's bounds (issue 24): clipped to open..close, one owner for a shared instant --------

def test_cmes_close_that_is_the_next_open_belongs_to_the_next_session_only(write_config):
    # CMES sessions touch: 2026-12-22 is 17:00 CST 12-21 .. 17:00 CST 12-22 (23:00 .. 23:00 UTC)
    # and 2026-12-23 opens at that same 23:00 UTC. Christmas Eve closes at 12:00 CST (18:00 UTC)
    # and the next session opens 12-27 23:00 UTC: that close keeps its slot.
    text = """
calendar = "CMES"
[[job]]
name = "futures"
every = "15min"
command = ["/usr/bin/true"]
"""
    got = fires(write_config, text, "2026-12-22", "2026-12-24")
    assert list(got["2026-12-22"].slots) == minutes("2026-12-21 23:00", "2026-12-22 22:45", 15)
    assert list(got["2026-12-23"].slots) == minutes("2026-12-22 23:00", "2026-12-23 22:45", 15)
    assert list(got["2026-12-24"].slots) == minutes("2026-12-23 23:00", "2026-12-24 18:00", 15)
    every_slot = [s for f in got.values() for s in f.slots]
    assert len(every_slot) == len(set(every_slot))  # no instant in two sessions
    # The last session asked for is judged by the session after it too (not by where the
    # range happens to end): the same slots when planned alone.
    alone = fires(write_config, text, "2026-12-22", "2026-12-22")
    assert alone["2026-12-22"].slots == got["2026-12-22"].slots


def test_24_7_midnight_belongs_to_the_day_it_opens(write_config):
    text = """
calendar = "24/7"
[[job]]
name = "poll"
every = "6h"
command = ["/usr/bin/true"]
"""
    got = fires(write_config, text, "2026-12-22", "2026-12-23")
    assert list(got["2026-12-22"].slots) == [utc("2026-12-22 00:00"), utc("2026-12-22 06:00"),
                                            utc("2026-12-22 12:00"), utc("2026-12-22 18:00")]
    assert got["2026-12-23"].slots[0] == utc("2026-12-23 00:00")


def test_window_past_the_close_is_clipped_to_the_early_close(write_config):
    # until = open+7h: 16:30 New York, after the 16:00 close: the window ends at the close
    # (21:00 UTC); on the 13:00 early close of 2026-12-24 at 18:00 UTC.
    text = CYCLE.replace('every = "1min"', 'every = "30min"').replace(
        "open+5min", "open").replace("close-10min", "open+7h")
    got = fires(write_config, text, "2026-12-23", "2026-12-24")
    assert list(got["2026-12-23"].slots) == minutes("2026-12-23 14:30", "2026-12-23 21:00", 30)
    assert list(got["2026-12-24"].slots) == minutes("2026-12-24 14:30", "2026-12-24 18:00", 30)


@pytest.mark.parametrize(("key", "value"), [("from", "open-30min"), ("until", "close+1h")])
def test_a_window_always_outside_the_session_is_refused_naming_the_key(write_config, key, value):
    found = problems(write_config, f'every = "5min"\n{key} = "{value}"')
    assert any(f": job.cycle.{key}: is " in line and "outside_session = true" in line
               and line.endswith(f"(got {value!r})") for line in found), found


def test_outside_session_keeps_slots_before_the_open(write_config):
    text = CYCLE.replace("open+5min", "open-30min").replace(
        'every = "1min"', 'every = "15min"') + "outside_session = true\n"
    got = fires(write_config, text, "2026-12-23", "2026-12-23")
    # 09:00 New York (14:00 UTC), half an hour before the open, to 15:45 (20:45 UTC).
    assert list(got["2026-12-23"].slots) == minutes("2026-12-23 14:00", "2026-12-23 20:45", 15)


def test_a_window_starting_in_the_break_runs_first_at_the_first_aligned_slot_after_it(
        write_config):
    # XHKG: from = open+2h45min is 12:15 Hong Kong (04:15 UTC), inside the 12:00-13:00 break.
    # Every 30 min aligned to 12:15: 12:15 and 12:45 fall in the break, so the first slot is
    # 13:15 Hong Kong (05:15 UTC), then every 30 min to 15:45 (07:45 UTC, 16:00 is not aligned).
    text = CYCLE.replace('calendar = "XNYS"', 'calendar = "XHKG"').replace(
        'every = "1min"', 'every = "30min"').replace("open+5min", "open+2h45min").replace(
        "close-10min", "close")
    got = fires(write_config, text, "2026-12-23", "2026-12-23")
    assert list(got["2026-12-23"].slots) == minutes("2026-12-23 05:15", "2026-12-23 07:45", 30)


@pytest.mark.parametrize("value", ["5s", "1min"])
def test_lead_on_a_periodic_job_is_refused(write_config, value):
    found = problems(write_config, f'every = "1min"\nlead = "{value}"')
    assert any(": job.cycle.lead: " in line and "fires at each slot" in line
               and line.endswith(f"(got {value!r})") for line in found), found


def test_lead_0s_on_a_periodic_job_is_accepted_and_the_timer_fires_at_the_slots(write_config):
    text = CYCLE + 'lead = "0s"\n'
    job = config.load(write_config(text)).job("cycle")
    assert job.fire_lead == 0
    default = config.load(write_config(CYCLE)).job("cycle")
    assert default.fire_lead == 0  # the 2 s default lead is a session job's
