"""`requires` on a real systemd: a failed upstream refuses the downstream (exit 176) with one
alert naming the upstream and its state; the downstream's session stays runnable."""

from __future__ import annotations

import time

import pytest

from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

LEAD = 12  # seconds from now to the upstream's instant: time to sync


def test_a_failed_upstream_refuses_the_downstream_with_one_alert(scenario: Scenario) -> None:
    instant = instant_in(LEAD)
    signal = Job("signal", instant, ["fail", "3"])
    orders = Job("closing-orders", instant_in(LEAD + 6), ["ok"], {"requires": ["signal"]})
    for job in (signal, orders):
        scenario.forget_runs(job)  # one UTC day: otherwise "already ran" (173)
    scenario.schedule([signal, orders])
    assert scenario.wait_finished(signal, LEAD + 20)["exit_status"] == "3"
    refused = scenario.wait_finished(orders, 30)
    print(refused)
    assert refused["refused"] == "requires-unmet" and refused["exit_status"] == "176"
    assert refused["upstream"] == "signal" and refused["upstream_state"] == "failed (exit 3)"
    assert "e2e-job" not in scenario.journal_of(orders)
    alert = scenario.wait_message("telegram", "closing-orders did not run", timeout=30)["text"]
    print(alert)
    assert "it requires signal, which did not succeed: failed (exit 3)" in alert
    time.sleep(3)  # one alert for the refusal, not a second one (the dead-man: not missed)
    assert len(scenario.messages("telegram", "closing-orders")) == 1
