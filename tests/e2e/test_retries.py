"""Retries of an idempotent job on a real systemd 252 (issue 13): Restart=on-failure restarts a
failed attempt, the runner runs it as attempt N of the same session (not a stale start), and
the failure is told once, after the last attempt (from its end record: market-alert-ends)."""

from __future__ import annotations

import time

import pytest

from .scenario import Job, Scenario, allowance_for, instant_in

pytestmark = pytest.mark.e2e

LEAD = 6
FLAKY = "/usr/local/lib/e2e-jobs/flaky"
FLAKY_SCRIPT = """#!/opt/venvs/market-timers/bin/python3
import os, sys
attempt = int(os.environ["MARKET_ATTEMPT"])
ok_from = int(sys.argv[1])
print(f"e2e-flaky attempt {attempt}", flush=True)
sys.exit(0 if attempt >= ok_from else 3)
"""


def schedule_flaky(s: Scenario, name: str, ok_from: int) -> Job:
    s.box.write_file(FLAKY, FLAKY_SCRIPT, mode=0o755)
    job = Job(name, instant_in(LEAD), [])
    s.write_config([], extra=(
        f'[[job]]\nname = "{name}"\nevent = "open"\noffset = "+{job.offset}s"\n'
        f'command = ["{FLAKY}", "{ok_from}"]\ngrace = "30s"\ntimeout = "1min"\n'
        'retries = 2\nretry_delay = "1s"\nretry_delay_max = "4s"\n'))
    s.jobs = [job]
    assert f"start {job.timer}" in s.sync()
    return job


def record(s: Scenario, job: Job) -> dict:
    """What status and the alert handler read: the run ledger's latest attempt."""
    return s.run_record(job) or {}


def test_failing_twice_then_succeeding_with_retries_2_is_one_success_and_no_alert(
    scenario: Scenario,
) -> None:
    job = schedule_flaky(scenario, "prices", ok_from=3)
    done = scenario.box.wait_for(lambda: (r := record(scenario, job)).get("result") == "success"
                                 and r, LEAD + 40 + allowance_for(job.instant),
                                 "attempt 3 to succeed", interval=0.3)
    assert (done["attempt"], done["attempts"], done["how"]) == (3, 3, "retry")
    journal = scenario.journal_of(job)
    print(journal)
    assert [line for line in journal.splitlines() if line.startswith("e2e-flaky")] == [
        "e2e-flaky attempt 1", "e2e-flaky attempt 2", "e2e-flaky attempt 3"]
    assert scenario.box.show(job.service, "NRestarts") == "2"
    time.sleep(4)  # the success handler has run; nothing was sent for the two failed attempts
    assert scenario.messages("telegram", "prices") == []
    assert scenario.messages("slack", "prices") == []


def test_failing_three_times_is_one_alert_naming_3_attempts(scenario: Scenario) -> None:
    job = schedule_flaky(scenario, "quotes", ok_from=99)
    alert = scenario.wait_message("telegram", "quotes failed", timeout=LEAD + 40 + allowance_for(job.instant))["text"]
    print(alert)
    assert alert.startswith("[CRITICAL] quotes failed with exit status 3 after 3 attempts")
    rec = record(scenario, job)
    assert (rec["attempt"], rec["exit_status"], rec["refused_starts"]) == (3, "3",
                                                                            ["retries-over"])
    time.sleep(4)
    assert len(scenario.messages("telegram", "quotes")) == 1
    assert scenario.messages("slack", "quotes") == []
    journal = scenario.journal_of(job)
    assert journal.count("e2e-flaky attempt") == 3
    assert "not retried again (all 3 attempts failed)" in journal
