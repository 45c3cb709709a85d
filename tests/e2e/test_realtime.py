"""Real-time at the instant, on a real systemd (issue 15, section 1): a pre-fired job's runner
and a warm job, under their rendered units, hold no capability once the job is exec'd and
cannot make themselves real-time, yet the escort has the job at SCHED_FIFO at its instant (its
first line; a warm job's return from wait_for_instant()) and back to normal after.

The lateness itself is measured in bench/alternatives.py, not asserted here.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

WARM = 4
FIFO = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK


def fields(line: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def test_a_pre_fired_and_a_warm_job_are_real_time_at_their_instant_and_hold_no_capability(
        scenario: Scenario) -> None:
    plain = Job("rtplain", instant_in(WARM + 8), ["instant"], {"lead": None})
    warm = Job("rtwarm", plain.instant + timedelta(seconds=1), ["instant"],
               {"lead": None, "warm": f"{WARM}s"})
    scenario.schedule([plain, warm])
    for job in (plain, warm):
        unit = scenario.box.read_file(f"/etc/systemd/system/{job.service}")
        assert "AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_SYS_NICE" in unit  # the runner's
        assert "RestrictRealtime=no" in unit
    for job in (plain, warm):
        record = scenario.wait_finished(job, WARM + 30)
        journal = scenario.journal_of(job)
        assert record["result"] == "success", journal
        line = next((x for x in journal.splitlines() if x.startswith("e2e-job instant ")), None)
        assert line is not None, journal
        got = fields(line)
        late_ms = (float(got["acted"]) - job.instant.timestamp()) * 1000
        print(f"[e2e] {job.service}: acted {late_ms:.3f} ms after its instant, policy "
              f"{got['policy_at']} then {got['policy_after']}")
        assert int(got["capeff"], 16) == int(got["capprm"], 16) == int(got["capamb"], 16) == 0
        assert got["own"] == "Operation-not-permitted"  # the job cannot make itself real-time
        assert int(got["policy_at"]) == FIFO, journal  # the escort lent it for the instant
        assert int(got["policy_after"]) == os.SCHED_OTHER  # and took it back
        assert late_ms >= 0
        assert "cannot lend" not in journal and "no CAP_SYS_NICE" not in journal


def test_a_job_with_lead_0s_gets_no_capability(scenario: Scenario) -> None:
    job = Job("rtnolead", instant_in(6), ["instant"])  # scenario's default: lead = "0s"
    scenario.schedule([job])
    unit = scenario.box.read_file(f"/etc/systemd/system/{job.service}")
    assert "CAP_SYS_NICE" not in unit  # only what the runner needs to start the job as its user
    assert "AmbientCapabilities=CAP_SETUID CAP_SETGID\n" in unit
    record = scenario.wait_finished(job, 30)
    got = fields(next(x for x in scenario.journal_of(job).splitlines()
                      if x.startswith("e2e-job instant ")))
    assert record["result"] == "success"
    assert int(got["capeff"], 16) == 0 and int(got["policy_at"]) == os.SCHED_OTHER
    assert got["own"] == "Operation-not-permitted"
