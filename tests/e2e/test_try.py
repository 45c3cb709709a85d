"""`market-timers try JOB` on a real systemd (issue 9): a job runs a few seconds from now, through
the runner and the sandbox, as session `try-<time>`, and no planned session's run is touched."""

from __future__ import annotations

import json
import re

import pytest

from .scenario import STATE_DIR, Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

RUNTIME_DIR = "/run/systemd/system"


def test_try_runs_the_job_once_now_without_touching_the_planned_run(scenario: Scenario) -> None:
    box = scenario.box
    planned = Job("trial", instant_in(3600), ["ok"])
    scenario.schedule([planned])
    try:
        out = box.run(["market-timers", "try", "trial", "--in", "5"], timeout=120).stdout
        print(out)
        m = re.search(r"started (market-trial@(try-\d{8}T\d{6}Z))\.timer", out)
        assert m, out
        stem, try_id = m[1], m[2]
        def finished():  # its record in the run ledger, under the try's own session id
            record = scenario.record_of("trial", try_id)
            return record if record and record.get("result") else None

        record = box.wait_for(finished, 30, f"{stem}.service to finish", interval=0.3)
        assert record["result"] == "success" and record["session"] == try_id
        journal = box.journal(f"MARKET_SESSION={try_id}", "-o", "cat")
        assert f"job=trial session={try_id}" in journal, journal
        assert box.show(f"{stem}.service", "User") == "market-timers"
        # No Persistent= stamp left, nothing in the live unit directory, not in the plan.
        assert not box.exists(f"/var/lib/systemd/timers/stamp-{stem}.timer")
        assert not box.exists(f"/etc/systemd/system/{stem}.timer")
        plan = json.loads(box.read_file(f"{STATE_DIR}/plan.json"))
        assert all(not e["session"].startswith("try-") for e in plan["fires"])
        # The planned run is still waiting, and a sync sees nothing to do about the try.
        assert box.show(planned.timer, "ActiveState") == "active"
        assert scenario.run_record(planned) is None
        assert "nothing to do" in scenario.sync()
    finally:
        box.run(f"systemctl stop 'market-trial@try-*'; rm -f {RUNTIME_DIR}/market-trial@try-*; "
                "systemctl daemon-reload; systemctl reset-failed 'market-*' || true",
                check=False)
