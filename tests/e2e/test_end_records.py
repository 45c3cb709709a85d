"""The job units' endings without a handler unit per (job, session) on a real systemd (issue 46,
item 2): a synced job's service has no OnFailure=/OnSuccess=, PID 1 loads no
market-alert-*@<job unit> instance with it, and its failure is still told, from the end record its
record step leaves (market-alert-ends.path); a unit that failed before its record step could run
(226/NAMESPACE) is told by the dead-man's sweep of failed units."""

from __future__ import annotations

import pytest

from .scenario import Job, Scenario, allowance_for, instant_in

pytestmark = pytest.mark.e2e

LEAD = 8
ENDS = "/var/lib/market-timers/ends"


def handler_instances(scenario: Scenario, job: Job) -> list[str]:
    out = scenario.box.systemctl("list-units", "--all", "--plain", "--no-legend", "--full",
                                 "market-alert-*").stdout
    return [line.split()[0] for line in out.splitlines() if f"market-{job.name}@" in line]


def test_a_synced_job_unit_loads_no_handler_and_its_failure_is_told_from_its_end_record(
        scenario: Scenario) -> None:
    box = scenario.box
    job = Job("endrec", instant_in(LEAD), ["fail", "3"])
    scenario.schedule([job])
    shown = box.systemctl("show", "--property=OnFailure", "--property=OnSuccess",
                          job.service).stdout
    assert sorted(shown.split()) == ["OnFailure=", "OnSuccess="]
    assert handler_instances(scenario, job) == []
    assert box.systemctl("is-active", "market-alert-ends.path").stdout.strip() == "active"
    alert = scenario.wait_message("telegram", "endrec failed with exit status 3",
                                  timeout=LEAD + 40 + allowance_for(job.instant),
                                  poll=scenario.flush_outbox)["text"]
    print(alert)
    assert alert.startswith("[CRITICAL] endrec failed with exit status 3")
    assert "broker rejected the order" in alert  # the invocation's journal, as before
    assert handler_instances(scenario, job) == []  # none loaded for its end either
    box.wait_for(lambda: box.run(["ls", "-A", ENDS]).stdout.strip() == "", 10,
                 "the end record to be removed", interval=0.3)
    assert len(scenario.messages("telegram", "endrec")) == 1


def test_a_job_unit_that_failed_before_its_record_step_is_told_by_the_dead_man(
        scenario: Scenario) -> None:
    box = scenario.box
    job = Job("norecord", instant_in(LEAD), ["ok"])
    scenario.schedule([job])
    dropin = f"/run/systemd/system/{job.service}.d"
    try:  # every process of the unit fails to set up its namespace: its record step too
        box.write_file(f"{dropin}/e2e-break.conf", "[Service]\nReadWritePaths=/nonexistent-e2e\n")
        box.systemctl("daemon-reload")
        alert = scenario.wait_message("telegram", "left no run ending",
                                      timeout=LEAD + 150 + allowance_for(job.instant),
                                      poll=scenario.flush_outbox)["text"]
        print(alert)
        assert alert.startswith(f"[CRITICAL] norecord failed for session {job.session}: its "
                                f"unit {job.service} failed and left no run ending")
        assert box.show(job.service, "ExecMainStatus") == "226"  # 226/NAMESPACE
        assert box.run(["ls", "-A", ENDS]).stdout.strip() == ""
    finally:
        box.run(["rm", "-rf", dropin], check=False)
        box.systemctl("daemon-reload", check=False)
