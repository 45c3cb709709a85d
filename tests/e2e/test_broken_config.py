"""Issue 9, High 1 on real systemd: one config typo must not silence alerting.

The job is synced with a good config (sync writes the alert snapshot), then the live config gets
a typo (`grace = 60`, an integer) before the job fires and fails. The failure handler still
reaches the fake Telegram (routed with the file's own [alerts], valid on its own, saying so; with
[alerts] broken too, with the snapshot root's sync wrote), and the broken config is one critical
alert of its own, not one per handler or outbox run.
"""

from __future__ import annotations

import pytest

from .scenario import CONFIG, Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

LEAD = 30  # seconds from now to the fire: sync, then the config edit (7-15 s on a loaded host;
# one CI run had a 20.5 s sync here, and the fire ran before the edit)


def test_broken_live_config_still_alerts_a_job_failure_and_says_once_it_is_broken(
    scenario: Scenario,
) -> None:
    job = Job("typo-victim", instant_in(LEAD), ["fail", "3"])
    scenario.schedule([job])
    assert scenario.box.exists("/var/lib/market-timers/sync/alerts-snapshot.json")
    typo = Job("typo", instant_in(3600), ["ok"], {"grace": 60})
    scenario.box.write_file(CONFIG, scenario.config_text([job, typo]))
    check = scenario.box.run(["market-timers", "plan"], check=False)
    assert check.returncode == 2 and "grace" in check.stderr  # the config is really broken

    assert scenario.wait_finished(job, LEAD + 20)["exit_status"] == "3"
    alert = scenario.wait_message("telegram", "typo-victim failed with exit status 3",
                                  timeout=60, poll=scenario.flush_outbox)["text"]
    print(alert)
    assert alert.startswith("[CRITICAL] typo-victim failed with exit status 3")
    assert "e2e-job step 2: broker rejected the order" in alert  # the handler read the journal
    assert f"the config {CONFIG} is broken" in alert
    assert "[alerts] and [watch] tables, which are valid on their own" in alert

    # its own alert, by its title: a refresh that fires meanwhile fails and says so in its body
    broken = scenario.wait_message("telegram", f"[CRITICAL] config {CONFIG} is broken",
                                   timeout=60, poll=scenario.flush_outbox)["text"]
    print(broken)
    assert broken.startswith(f"[CRITICAL] config {CONFIG} is broken")
    assert "job.typo.grace" in broken  # named by its name, not its place
    for _ in range(3):  # more handler/outbox/deadman runs: still one such alert
        scenario.flush_outbox()
        scenario.box.run(["market-timers", "deadman"], check=False, timeout=60)
    assert len(scenario.messages("telegram", f"[CRITICAL] config {CONFIG} is broken")) == 1

    # [alerts] broken as well: the root-owned snapshot routes the next failure.
    again = Job("typo-victim2", instant_in(LEAD), ["fail", "3"])
    scenario.schedule([again])
    scenario.box.write_file(CONFIG, scenario.config_text([again]).replace(
        "repeat_minutes = 0", "repeat_minutes = -1", 1))
    assert scenario.wait_finished(again, LEAD + 20)["exit_status"] == "3"
    alert = scenario.wait_message("telegram", "typo-victim2 failed with exit status 3",
                                  timeout=60, poll=scenario.flush_outbox)["text"]
    assert "last good snapshot written by sync" in alert
