"""Every calendar exchange_calendars ships builds and plans (one process, calendars cached)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from market_timers import calendars, config, plan


def job_name(calendar: str, event: str) -> str:
    return "c-" + re.sub(r"[^a-z0-9]+", "-", calendar.lower()).strip("-") + "-" + event


@pytest.fixture(scope="module")
def every_calendar(tmp_path_factory):
    names = calendars.canonical_names()
    jobs = "".join(f'[[job]]\nname = "{job_name(c, e)}"\ncalendar = "{c}"\nevent = "{e}"\n'
                   'command = ["/bin/true"]\n' for c in names for e in ("open", "close"))
    path = tmp_path_factory.mktemp("all") / "market-timers.toml"
    path.write_text(jobs)
    return names, config.load(path)


def test_exchange_calendars_ships_many_calendars(every_calendar):
    names, _ = every_calendar
    assert len(names) >= 60 and "XNYS" in names and "XSHG" in names


def test_every_calendar_plans_a_job_at_open_and_close_or_says_where_its_data_ends(
        every_calendar):
    names, cfg = every_calendar
    today = datetime.now(UTC).date()
    # A month from now, for a fortnight: crosses a year end in December, when yearly tables end.
    start, end = today + timedelta(days=30), today + timedelta(days=44)
    result = plan.plan_between_partial(cfg, start, end)
    failed = {f.calendar: f.reason for f in result.failures}
    fired = {f.calendar for f in result.fires}
    for name in names:
        _, last = calendars.data_limits(name)
        if last is not None and last < end:
            assert str(last) in failed[name] and "holidays up to" in failed[name], name
        else:
            assert name not in failed, (name, failed.get(name))
        if last is None or last >= start:
            assert name in fired, f"{name}: no session planned in {start}..{end}"
    for f in result.fires:
        assert f.event in ("open", "close") and f.job == job_name(f.calendar, f.event)
        assert start <= f.session <= end


def test_every_calendar_plans_ahead_from_now(every_calendar):
    names, cfg = every_calendar
    # The same weeks as above (the calendars built there are reused).
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    result = plan.plan_ahead_partial(cfg, now, horizon=3)
    failed = {f.calendar: f.reason for f in result.failures}
    fired = {f.calendar for f in result.fires}
    for name in names:
        _, last = calendars.data_limits(name)
        if last is not None and last < now.date():
            assert str(last) in failed[name], name  # its data has ended: said, with the date
        else:
            assert name not in failed and name in fired, (name, failed.get(name))
