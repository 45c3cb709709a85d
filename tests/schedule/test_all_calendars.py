"""Every calendar exchange_calendars ships builds and plans (one process, calendars cached)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from market_timers.config import loader as config
from market_timers.schedule import calendars, plan


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


def _ahead_instants() -> list[datetime]:
    """A month from now (the weeks above), and around the last day of each calendar whose data
    ends soon (when exchange_calendars' yearly tables run out): late on that day, after its
    sessions, and early the next day. The same test then holds whatever day it runs on."""
    now = datetime.now(UTC).replace(microsecond=0)
    out = [now + timedelta(days=30)]
    ends = {calendars.data_limits(n)[1] for n in calendars.canonical_names()}
    for last in sorted(d for d in ends if d is not None and d <= (now + timedelta(days=400)).date()):
        day = datetime.combine(last, datetime.min.time(), UTC)
        out += [day + timedelta(hours=6), day + timedelta(hours=23), day + timedelta(hours=25)]
    return out


@pytest.mark.parametrize("now", _ahead_instants(), ids=lambda t: f"{t:%Y-%m-%dT%H}")
def test_every_calendar_plans_ahead_or_says_its_data_ended(every_calendar, now):
    names, cfg = every_calendar
    result = plan.plan_ahead_partial(cfg, now, horizon=3)
    failed = {f.calendar: f.reason for f in result.failures}
    fired = {f.calendar for f in result.fires}
    for name in names:
        _, last = calendars.data_limits(name)
        # Never silent: each calendar either has fires ahead or a failure saying where its
        # data ends; never both.
        assert (name in fired) != (name in failed), (name, failed.get(name))
        if name in failed:
            assert last is not None and last < (now + timedelta(days=14)).date(), failed[name]
            assert str(last) in failed[name] and "holidays up to" in failed[name], failed[name]
        if last is not None and last < now.date():
            assert name in failed, name  # its data has ended: said, with the date
    assert all(f.fire_utc > now for f in result.fires)
