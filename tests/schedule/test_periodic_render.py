"""Periodic jobs' units: one timer per (job, session) whose OnCalendar= lines cover exactly the
plan's slots, as systemd 252 itself reads them (`systemd-analyze calendar --iterations`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, date, datetime, timedelta

import pytest

from market_timers.config import loader as config
from market_timers.schedule import plan, render
from market_timers.schedule.periodic import calendar_lines

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None and
                                   os.environ.get("CI") != "true",
                                   reason="systemd-analyze is not installed")

JOB = """
[[job]]
name = "cycle"
every = "{every}"
from = "{start}"
until = "{until}"
command = ["/usr/bin/true"]
"""

ELAPSE = re.compile(r"(?:Next elapse|Iter\. #\d+): \w{3} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC$")


def systemd_slots(lines: list[str], base: datetime, count: int) -> list[datetime]:
    """Every elapse of the OnCalendar= values from `base`, as systemd-analyze lists them."""
    proc = subprocess.run(
        ["systemd-analyze", "calendar", f"--base-time={base:%Y-%m-%d %H:%M:%S} UTC",
         f"--iterations={count + 2}", *lines],
        capture_output=True, text=True, check=True, env={**os.environ, "TZ": "UTC"})
    found = {datetime.fromisoformat(m[1]).replace(tzinfo=UTC)
             for line in proc.stdout.splitlines() if (m := ELAPSE.search(line.strip()))}
    return sorted(found)


def timers_for(write_config, calendar: str, day: str, every="1min", start="open+5min",
               until="close-10min", extra=""):
    cfg = config.load(write_config(f'calendar = "{calendar}"\n'
                                   + JOB.format(every=every, start=start, until=until) + extra))
    d = date.fromisoformat(day)
    fires = plan.plan_between(cfg, d, d)
    assert len(fires) == 1
    units = {u.name: u.text for u in render.render_all(cfg, fires, runner="/usr/bin/run")}
    timers = [t for n, t in units.items() if n.endswith(".timer")]
    assert len(timers) == 1, "one timer per (job, session), not one per slot"
    return fires[0], timers[0], units


def on_calendar(timer: str) -> list[str]:
    return [line.split("=", 1)[1] for line in timer.splitlines() if line.startswith("OnCalendar=")]


@needs_analyze
@pytest.mark.parametrize(("calendar", "day", "kw"), [
    ("XNYS", "2026-12-24", {}),  # the 13:00 early close
    ("XNYS", "2027-03-15", {}),  # after the US DST change
    ("XHKG", "2026-12-23", {}),  # the lunch break pauses the slots
    ("XHKG", "2026-12-23", {"every": "5min", "start": "open+2min"}),
    ("CMES", "2027-03-15", {"every": "15min", "start": "open", "until": "close-1h"}),  # overnight
    ("XNYS", "2026-12-23", {"every": "10s", "start": "open+5min", "until": "open+35min"}),
    ("XNYS", "2026-12-23", {"every": "2h", "start": "open+1min", "until": "close"}),
])
def test_systemd_reads_the_timer_as_exactly_the_plans_slots(write_config, calendar, day, kw):
    fire, timer, _ = timers_for(write_config, calendar, day, **kw)
    lines = on_calendar(timer)
    assert 1 <= len(lines) <= 8, lines
    got = systemd_slots(lines, fire.slots[0] - timedelta(seconds=1), len(fire.slots))
    assert got == list(fire.slots)


@needs_analyze
def test_the_rendered_units_pass_systemd_analyze_verify(write_config, tmp_path):
    _, _, units = timers_for(write_config, "XHKG", "2026-12-23")
    out = tmp_path / "units"
    out.mkdir()
    for name, text in units.items():
        (out / name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", *map(str, out.iterdir())],
                          capture_output=True, text=True)
    complaints = [line for line in (proc.stdout + proc.stderr).splitlines()
                  if "market-" in line and "OnCalendar" in line]
    assert not complaints, complaints


def test_timer_settings_and_the_runner_context(write_config):
    fire, timer, units = timers_for(write_config, "XHKG", "2026-12-23")
    assert "AccuracySec=1us" in timer and "Persistent=true" in timer
    service = next(t for n, t in units.items() if n.endswith(".service"))
    env = dict(line.removeprefix("Environment=").split("=", 1)
               for line in service.splitlines() if line.startswith("Environment=MARKET_"))
    assert env["MARKET_SLOT_FIRST_UTC"] == "2026-12-23T01:35:00Z"
    assert env["MARKET_SLOT_LAST_UTC"] == "2026-12-23T07:50:00Z"
    assert env["MARKET_SLOT_EVERY_SEC"] == "60"
    assert env["MARKET_SLOT_PAUSE_UTC"] == "2026-12-23T04:00:00Z/2026-12-23T05:00:00Z"
    assert env["MARKET_GRACE_SEC"] == "30"
    assert "MARKET_SCHEDULED_UTC" not in env
    # sync reads the timer's last slot (its retention and "still ahead" are judged by it)
    assert render.timer_instant(timer) == datetime(2026, 12, 23, 7, 50, tzinfo=UTC)


def test_a_changed_slot_list_is_a_new_unit_name(write_config):
    a, _, _ = timers_for(write_config, "XNYS", "2026-12-23")
    b, _, _ = timers_for(write_config, "XNYS", "2026-12-23", until="close-15min")
    c, _, _ = timers_for(write_config, "XNYS", "2026-12-23", every="2min")
    names = {a.unit_stem, b.unit_stem, c.unit_stem}
    assert len(names) == 3
    assert all(n.startswith("market-cycle@2026-12-23-143500-") for n in names)


def test_calendar_lines_for_a_whole_nyse_day_are_three():
    first = datetime(2026, 12, 23, 14, 35, tzinfo=UTC)
    slots = [first + timedelta(minutes=k) for k in range(376)]
    assert calendar_lines(slots) == ["2026-12-23 14:35..59:00 UTC",
                                     "2026-12-23 15..19:*:00 UTC",
                                     "2026-12-23 20:00..50:00 UTC"]


@needs_analyze
def test_verify_does_not_call_a_running_periodic_timer_past():
    from market_timers.schedule.verify import check_calendar

    got = check_calendar({"2020-01-01 10:00:00 UTC": ["old.timer", "cycle.timer"],
                          "2099-01-01 10:00..59:00 UTC": ["cycle.timer"]})
    assert got == ["old.timer: OnCalendar=2020-01-01 10:00:00 UTC is in the past "
                   "(Next elapse: never)"]
