"""Operator controls on a real systemd (issue 26): a backfill over past sessions runs those that
did not run, in order, once each; a paused job's session is neither run nor called missed, and
`pause_on_failure` holds the lock group after a failure until `resume --group`."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from datetime import time as clock

import pytest

from .scenario import CONFIG, STATE_DIR, Job, Scenario, instant_in
from .test_watch import start_deadman

pytestmark = pytest.mark.e2e

LEAD = 12  # seconds from now to the first instant: time to sync


def sessions_run(scenario: Scenario, job: str) -> list[str]:
    """The sessions the job's runs printed (MARKET_SESSION), in the order they ran."""
    out = scenario.box.journal(f"MARKET_JOB={job}", "_TRANSPORT=stdout", "-o", "cat")
    return re.findall(r"^e2e-job start=\S+ user=\S+ job=\S+ session=(\S+)", out, re.M)


def test_a_backfill_runs_the_past_sessions_that_did_not_run_in_order_once_each(
    scenario: Scenario,
) -> None:
    box = scenario.box
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in range(5, 0, -1)]  # 24/7: every UTC day a session
    job = Job("backfilled", datetime.combine(days[0], clock(1, 0), tzinfo=UTC), ["ok"])
    scenario.write_config([job])  # past sessions only: no timer to sync
    for day in (days[1], days[3]):  # two of them ran before, by hand
        box.run(["market-timers", "run", job.name, "--session", day.isoformat()])
        box.wait_for(lambda d=day: (scenario.record_of(job.name, d.isoformat()) or {})
                     .get("result"), 60, f"the run of {day} to finish", interval=0.3)

    done = box.run(["market-timers", "run", job.name, "--from", days[0].isoformat(), "--to",
                    days[-1].isoformat()], timeout=300)
    print(done.stdout)
    assert f"{days[1]}  backfilled: already ran" in done.stdout
    assert "summary: 3 ran ok, 2 already ran" in done.stdout
    assert sessions_run(scenario, job.name) == [str(d) for d in
                                                (days[1], days[3], days[0], days[2], days[4])]
    for day in days:
        record = scenario.record_of(job.name, day.isoformat())
        assert (record["result"], record["attempts"], record["how"]) == \
            ("success", 1, "operator")

    again = box.run(["market-timers", "run", job.name, "--from", days[0].isoformat(), "--to",
                     days[-1].isoformat(), "--json"], timeout=120)
    report = json.loads(again.stdout)
    assert [r["outcome"] for r in report["runs"]] == ["already-ran"] * 5 and report["ok"]
    assert len(sessions_run(scenario, job.name)) == 5


def test_a_paused_job_neither_runs_nor_is_missed_and_a_failure_pauses_its_group(
    scenario: Scenario,
) -> None:
    box = scenario.box
    quick = {"grace": "1s", "timeout": "3s"}
    # job names no other e2e test uses: a job's journal is read per job and UTC day
    held = Job("held", instant_in(LEAD), ["ok"], quick)
    failing = Job("failing-orders", instant_in(LEAD + 2), ["fail", "3"],
                  {**quick, "lock": "held-orders", "pause_on_failure": True})
    next_one = Job("held-after-failure", instant_in(LEAD + 8), ["ok"],
                   {**quick, "lock": "held-orders"})
    after_resume = Job("after-resume", instant_in(LEAD + 22), ["ok"],
                       {**quick, "lock": "held-orders"})
    jobs = [held, failing, next_one, after_resume]
    for job in jobs:
        scenario.forget_runs(job)  # one UTC day: otherwise "already ran" (173)
    scenario.write_config(jobs)
    box.run(["market-timers", "pause", held.name, "--note", "broker maintenance"])
    try:
        check_pauses(scenario, held, failing, next_one, after_resume)
    finally:  # the controls outlive the scenario's teardown: no pause left for other tests
        box.run(["market-timers", "resume", held.name], check=False)
        box.run(["market-timers", "resume", "--group", "held-orders"], check=False)


def check_pauses(scenario: Scenario, held: Job, failing: Job, next_one: Job,
                 after_resume: Job) -> None:
    box = scenario.box
    scenario.schedule([held, failing, next_one, after_resume])

    refused = scenario.wait_finished(held, LEAD + 20)
    assert (refused["refused"], refused["exit_status"]) == ("paused", "177")
    assert "e2e-job" not in scenario.journal_of(held)
    assert scenario.wait_finished(failing, 30)["exit_status"] == "3"
    refused = scenario.wait_finished(next_one, 30)
    assert (refused["refused"], refused["exit_status"]) == ("paused", "177")
    assert "e2e-job" not in scenario.journal_of(next_one)
    resumed = box.run(["market-timers", "resume", "--group", "held-orders"])
    print(resumed.stdout)
    assert time.time() < after_resume.instant.timestamp(), "resumed after the next instant"
    ran = scenario.wait_finished(after_resume, 40)
    assert (ran["result"], ran["attempts"]) == ("success", 1)
    assert "e2e-job finished fine" in scenario.journal_of(after_resume)

    # the paused session is past its grace and timeout: the dead-man does not call it missed
    time.sleep(max(0.0, held.instant.timestamp() + 7 - time.time()))
    start_deadman(box)
    time.sleep(3)
    status = box.run(["market-timers", "status", "--session", held.session.isoformat()]).stdout
    print(status)
    assert "paused (broker maintenance)" in status
    assert scenario.messages("telegram", "held", "has no run record") == []
    assert scenario.messages("telegram", next_one.name, "has no run record") == []


OPERATOR, OUTSIDER, DESK = "e2e-operator", "e2e-outsider", "e2e-desk"
REQUESTS_IN = "/var/lib/market-timers-requests/in"
OP_ON_HALT = "/usr/local/lib/e2e-jobs/desk-cancel-all"
OP_ON_HALT_LOG = "/var/lib/market-jobs/desk-on-halt.log"


def as_user(scenario: Scenario, user: str, *argv: str):
    done = scenario.box.run(["runuser", "-u", user, "--", "market-timers", *argv], check=False,
                            timeout=200)
    print(f"[e2e] {user}: market-timers {' '.join(argv)}: exit {done.returncode}\n"
          f"{done.stdout}{done.stderr}")
    return done


def test_an_operator_halts_through_root_and_a_non_members_request_changes_nothing(
    scenario: Scenario,
) -> None:
    """Issue 41 item 4: a member of operator_group (not root, not in the package's group) halts
    on the installed layout: the running order job stops, on_halt runs, the alert arrives."""
    box = scenario.box
    box.run(f"getent group {DESK} || groupadd {DESK}; id {OPERATOR} || useradd -M -G {DESK} "
            f"{OPERATOR}; id {OUTSIDER} || useradd -M {OUTSIDER}")
    running = Job("desk-orders", instant_in(LEAD), ["sleep", "120"], {"orders": True})
    scenario.forget_runs(running)
    box.write_file(OP_ON_HALT, f"#!/bin/sh\necho \"by=$MARKET_HALT_BY user=$(id -un) "
                   f"reason=$MARKET_HALT_REASON\" >> {OP_ON_HALT_LOG}\n", mode=0o755)
    box.run(["rm", "-f", OP_ON_HALT_LOG])
    scenario.jobs = [running]
    box.write_file(CONFIG, f'on_halt = ["{OP_ON_HALT}"]\noperator_group = "{DESK}"\n'
                   + scenario.config_text([running]))
    scenario.sync()
    try:
        assert box.run(["stat", "-c", "%a %U %G", REQUESTS_IN]).stdout.split() == \
            ["1730", "root", DESK]
        box.wait_for(lambda: box.show(running.service, "ActiveState") == "active", LEAD + 15,
                     "desk-orders to run")

        # not a member: its own command is refused, and a request planted in its name too
        outsider = as_user(scenario, OUTSIDER, "halt", "--reason", "not mine")
        assert outsider.returncode == 1 and "operator group" in outsider.stderr
        planted = f"{REQUESTS_IN}/{'a' * 32}.json"
        box.write_file(planted, json.dumps({"command": "halt",
                                            "fields": {"reason": "planted"}}), mode=0o600)
        box.run(["chown", OUTSIDER, planted])
        box.wait_for(lambda: not box.exists(planted), 20, "root to take the planted request")
        log = box.journal("-u", "market-controls.service", "-o", "cat")
        assert f"refused {planted}" in log and "neither root nor a member" in log
        assert not box.exists(f"{STATE_DIR}/controls/halt-orders")
        assert box.show(running.service, "ActiveState") == "active"

        halted = as_user(scenario, OPERATOR, "halt", "--reason", "desk halt")
        print(halted.stdout, halted.stderr)
        assert halted.returncode == 0
        assert running.service in halted.stdout and "halted order jobs" in halted.stdout
        assert "on_halt ran: exit 0" in halted.stdout
        assert box.show(running.service, "ActiveState") in ("inactive", "failed")
        [line] = box.read_file(OP_ON_HALT_LOG).splitlines()
        assert f"by={OPERATOR}" in line and "user=market-jobs" in line and "desk halt" in line
        # the child that spools the alert as the package's user: what it said is in the answer
        assert "could not" not in halted.stderr and "Traceback" not in halted.stderr
        # the title names the scope as halts.describe() does (the needle "HALT: order jobs
        # halted by" matched no message: the alert was sent, and the test waited in vain)
        title = f"HALT: order jobs (orders = true) halted by {OPERATOR} on "
        try:
            alert = scenario.wait_message("telegram", title, timeout=30,
                                          poll=scenario.flush_outbox)["text"]
        except TimeoutError:
            print("[e2e] telegram received:", [m["text"][:120] for m in
                                               scenario.messages("telegram")])
            raise
        assert "desk halt" in alert

        resumed = as_user(scenario, OPERATOR, "resume")
        assert resumed.returncode == 0 and "ended the halt of order jobs" in resumed.stdout
        assert not box.exists(f"{STATE_DIR}/controls/halt-orders")
    finally:
        box.run(["market-timers", "resume"], check=False)
        box.run(["rm", "-f", OP_ON_HALT, OP_ON_HALT_LOG], check=False)
