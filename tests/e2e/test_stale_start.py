"""A fire missed while the machine was off (issue 5, case 5): Persistent=true fires it once at
boot, and the runner refuses it when it is later than the job's grace."""

from __future__ import annotations

import time

import pytest

from .scenario import Job, Scenario, instant_in, iso

pytestmark = pytest.mark.e2e


def test_fire_missed_while_powered_off_is_refused_after_its_grace_and_runs_once_within_it(
    scenario: Scenario,
) -> None:
    box = scenario.box
    instant = instant_in(6)
    late = Job("late", instant, ["ok"], {"grace": "1s"})
    patient = Job("patient", instant, ["ok"], {"grace": "5min"})
    scenario.schedule([late, patient])

    box.poweroff()
    assert time.time() < instant.timestamp(), "the poweroff ended after the instant"
    time.sleep(instant.timestamp() + 3 - time.time())  # off across the instant, past 1s grace
    box.boot()

    refused = scenario.wait_finished(late, 30)
    print(refused)
    assert refused["refused"] == "stale-start" and refused["exit_status"] == "170"
    assert refused["late_sec"] > 1
    assert "e2e-job start" not in scenario.journal_of(late)
    alert = scenario.wait_message("telegram", "late started too late", timeout=30)["text"]
    print(alert)
    assert alert.startswith("[CRITICAL] late started too late and did not run (stale start)")
    assert f"session: {late.session}" in alert and "stale start: late" in alert

    ran = scenario.wait_finished(patient, 30)
    assert ran["result"] == "success" and ran["scheduled_utc"] == iso(instant)
    time.sleep(2)  # a second fire would be immediate
    assert scenario.journal_of(patient).count("e2e-job start") == 1
