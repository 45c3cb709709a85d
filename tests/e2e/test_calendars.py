"""A calendar that cannot be planned costs only its own jobs, on a real systemd (issue 9)."""

from __future__ import annotations

import pytest

from .scenario import UNIT_DIR, Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

# XSHG keeps its holidays as yearly tables: exchange_calendars 4.13 has no session after
# 2026-12-31. A refresh that believes it is 2027-01-04 finds XSHG's data ended.
AFTER_XSHG = "2027-01-04T00:00:00Z"


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
    nonstop = Job("nonstop", instant_in(600), ["ok"])
    shanghai = '\n[[job]]\nname = "shanghai"\ncalendar = "XSHG"\nevent = "close"\n' \
               'command = ["/bin/true"]\n'
    scenario.write_config([nonstop], horizon=2, extra=shanghai)
    out = scenario.sync()
    xshg = sorted(line.split()[1] for line in out.splitlines()
                  if line.startswith("start market-shanghai@"))
    assert xshg, f"no XSHG timer installed by the first sync:\n{out}"

    run = box.run(["market-timers", "--now", AFTER_XSHG, "refresh"], check=False, timeout=300)
    assert run.returncode == 1, run.stderr
    timers = scenario.list_timers()
    # the 24/7 job's sessions of the (pretended) 2027-01-04 and 05 are installed and waiting
    assert "market-nonstop@2027-01-04-" in timers and "market-nonstop@2027-01-05-" in timers
    # XSHG's timers installed before stay, still waiting to fire
    for unit in xshg:
        assert box.exists(f"{UNIT_DIR}/{unit}"), f"{unit} was removed"
        assert box.show(unit, "ActiveState") == "active"
    alert = scenario.wait_message("telegram", "calendar XSHG could not be planned", timeout=90,
                                  poll=scenario.flush_outbox)["text"]
    print(alert)
    assert "holidays up to 2026-12-31 only" in alert and "shanghai" in alert
