"""A calendar that cannot be planned costs only its own jobs, on a real systemd (issue 9)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from market_timers.schedule import calendars

from .scenario import UNIT_DIR, Job, Scenario, instant_in

pytestmark = pytest.mark.e2e


def ending_calendar() -> tuple[str, date]:
    """The calendar whose holiday data ends first, at least a week from today (a sync today
    plans some of its sessions): e.g. XSHG, whose yearly tables in exchange_calendars 4.13 end
    on 2026-12-31. A refresh that believes it is a few days after that finds its data ended."""
    week = datetime.now(UTC).date() + timedelta(days=7)
    ends = sorted((last, name) for name in calendars.canonical_names()
                  if (last := calendars.data_limits(name)[1]) is not None and last >= week)
    last, name = ends[0]
    return name, last


def test_refresh_with_one_calendar_failing_installs_the_others_and_alerts_critical(
    scenario: Scenario,
) -> None:
    box = scenario.box
    # The package's own refresh (1 min after boot, then daily) plans with the real clock and
    # would undo the pretended one: keep it out of the way for this test.
    box.systemctl("stop", "market-refresh.timer")
    box.run(["sh", "-c", "while [ \"$(systemctl show -P ActiveState market-refresh.service)\" "
             "= activating ]; do sleep 0.2; done"], timeout=300)  # a oneshot runs "activating"
    try:
        _check_isolation(scenario, box)
    finally:
        box.systemctl("start", "market-refresh.timer")


def _check_isolation(scenario: Scenario, box) -> None:
    cal, last = ending_calendar()
    after = last + timedelta(days=4)
    nonstop = Job("nonstop", instant_in(600), ["ok"])
    ending = f'\n[[job]]\nname = "ending"\ncalendar = "{cal}"\nevent = "close"\n' \
             'command = ["/bin/true"]\n'
    scenario.write_config([nonstop], horizon=2, extra=ending)
    out = scenario.sync()
    installed = sorted(line.split()[1] for line in out.splitlines()
                       if line.startswith("start market-ending@"))
    assert installed, f"no {cal} timer installed by the first sync:\n{out}"

    run = box.run(["market-timers", "--now", f"{after}T00:00:00Z", "refresh"], check=False,
                  timeout=300)
    assert run.returncode == 1, run.stderr
    timers = scenario.list_timers()
    # the 24/7 job's sessions of the (pretended) day and the next are installed and waiting
    for day in (after, after + timedelta(days=1)):
        assert f"market-nonstop@{day}-" in timers, (day, timers)
    # the timers of the calendar whose data ended, installed before, stay, still waiting
    for unit in installed:
        assert box.exists(f"{UNIT_DIR}/{unit}"), f"{unit} was removed"
        assert box.show(unit, "ActiveState") == "active"
    alert = scenario.wait_message("telegram", f"calendar {cal} could not be planned",
                                  timeout=90, poll=scenario.flush_outbox)["text"]
    print(alert)
    assert f"holidays up to {last} only" in alert and "ending" in alert
