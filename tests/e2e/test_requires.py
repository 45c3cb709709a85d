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


@pytest.mark.parametrize("name, mode, told", [
    ("selfterm", ["term"], "selfterm was killed by signal TERM"),
    ("exit178", ["fail", "178"], "exit178 failed with exit status 178"),
], ids=["sigterm-itself", "exit-178"])
def test_an_upstream_that_sigterms_itself_or_exits_178_is_a_failure_alerted_and_refuses_the_downstream(
        scenario: Scenario, name: str, mode: list[str], told: str) -> None:
    """issue 45: a job's SIGTERM (a clean end for systemd) and its own exit 178 (the runner's
    halted status) are the job's failures: the unit fails, the alert says so, `requires` holds."""
    upstream = Job(name, instant_in(LEAD), mode)
    downstream = Job(f"after-{name}", instant_in(LEAD + 6), ["ok"], {"requires": [name]})
    for job in (upstream, downstream):
        scenario.forget_runs(job)
    scenario.schedule([upstream, downstream])
    ran = scenario.wait_finished(upstream, LEAD + 20)
    print(ran)
    assert not ran.get("refused") and ran["result"] != "success"
    assert scenario.box.show(upstream.service, "Result") == "exit-code"
    alert = scenario.wait_message("telegram", told, timeout=30)["text"]
    assert alert.startswith(f"[CRITICAL] {told}")
    refused = scenario.wait_finished(downstream, 30)
    assert refused["refused"] == "requires-unmet"
    assert "e2e-job" not in scenario.journal_of(downstream)


def test_requires_wait_chains_two_jobs_of_one_instant(scenario: Scenario) -> None:
    """issue 42: connect and reconcile at one instant; reconcile waits (requires_wait) for
    connect, still running, and runs once it has succeeded."""
    instant = instant_in(LEAD)
    connect = Job("connect", instant, ["sleep", "4"])
    reconcile = Job("reconcile", instant, ["ok"],
                    {"requires": ["connect"], "requires_wait": "60s"})
    for job in (connect, reconcile):
        scenario.forget_runs(job)
    scenario.schedule([connect, reconcile])
    up = scenario.wait_finished(connect, LEAD + 30)
    assert up["result"] == "success", up
    ran = scenario.wait_finished(reconcile, 30)
    print(ran)
    assert ran["result"] == "success" and not ran.get("refused"), ran
    assert ran["started_utc"] >= up["finished_utc"]  # it waited for connect's end
    assert "waits up to 60 s for connect" in scenario.journal_of(reconcile)
