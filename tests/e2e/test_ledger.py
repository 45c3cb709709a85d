"""The run ledger on a real systemd (issue 10, section 1): a session's job runs once.

The live bug: `closing-orders` fired at close -10min; the operator then moved it to -5min and ran
sync, which installed the later timer and sent the orders a second time. Here the job appends a
line to a file for each run ("sends the orders"); the config moves it after it fired; sync must
not schedule it again, a second start of the session is refused with 173 and reported as an
`already-ran` warning, and only `market-timers run --force` runs it again, as attempt 2.
"""

from __future__ import annotations

import json
import time

import pytest

from .scenario import JOB_HOME, Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

LEAD = 6
SENT = f"{JOB_HOME}/e2e-orders-sent"  # the job user's home: writable by the job


def lines_sent(scenario: Scenario) -> list[str]:
    result = scenario.box.run(["cat", SENT], check=False)
    return result.stdout.splitlines() if result.returncode == 0 else []


def fire_once(scenario: Scenario) -> Job:
    scenario.box.run(["rm", "-f", SENT])
    first = Job("orders", instant_in(LEAD), ["append", SENT])
    scenario.schedule([first])
    assert scenario.wait_finished(first, LEAD + 20)["result"] == "success"
    assert lines_sent(scenario) == ["sent attempt=1"]
    return first


def test_a_session_moved_later_after_it_ran_is_not_run_again_and_a_second_start_exits_173(
    scenario: Scenario,
) -> None:
    box = scenario.box
    first = fire_once(scenario)
    session = first.session.isoformat()

    # The operator moves the job 8 s later in the same session and syncs.
    moved = Job("orders", instant_in(8), ["append", SENT])
    assert moved.session == first.session, "the test ran across midnight UTC"
    scenario.write_config([moved])
    out = scenario.sync()
    print(out)
    assert f"not install {moved.timer}: orders already ran for session {session} (at " in out
    assert (f"orders moved from {first.instant:%Y-%m-%dT%H:%M:%SZ} to "
            f"{moved.instant:%Y-%m-%dT%H:%M:%SZ}; it already ran: not installed") in out
    assert scenario.timer_row(moved) is None
    time.sleep(max(0.0, moved.instant.timestamp() + 3 - time.time()))
    assert lines_sent(scenario) == ["sent attempt=1"]

    # A second start of that session's unit (by hand, a catch-up...) is refused by the runner.
    box.systemctl("start", first.service, check=False)

    def refused():
        found = [r for r in scenario.ledger(first)["refusals"]
                 if r.get("refused") == "already-ran" and r.get("exit_status")]
        return found[0] if found else None

    note = box.wait_for(refused, 20, "the already-ran refusal in the ledger", interval=0.2)
    assert note["exit_status"] == "173"
    assert box.show(first.service, "ExecMainStatus") == "173"
    assert lines_sent(scenario) == ["sent attempt=1"]
    journal = scenario.journal_of(first)
    assert f"already ran: orders for session {session} was started at " in journal
    host = box.run(["cat", "/proc/sys/kernel/hostname"]).stdout.strip()
    assert f"on host {host} (pid " in journal
    alert = scenario.wait_message("slack", "orders already ran", timeout=30)["text"]
    print(alert)
    assert alert.startswith(f"[WARNING] orders already ran for session {session}: this second "
                            "start was refused")
    assert scenario.messages("telegram", "job: orders") == []  # a warning, not a failure

    # `market-timers run` without --force refuses too; status tells what happened.
    again = box.run(["market-timers", "run", "orders", "--session", session], check=False)
    assert again.returncode == 2 and "orders already ran for session" in again.stderr
    status = json.loads(box.run(["market-timers", "status", "--session", session,
                                 "--json"]).stdout)
    [row] = [j for s in status["sessions"] for j in s["jobs"] if j["job"] == "orders"]
    assert row["result"] == "success" and row["attempts"] == 1
    assert "already-ran" in row["refused_starts"]


def test_run_force_runs_the_session_again_as_a_recorded_second_attempt(
    scenario: Scenario,
) -> None:
    box = scenario.box
    first = fire_once(scenario)
    session = first.session.isoformat()
    started = box.run(["market-timers", "run", "orders", "--session", session, "--force"],
                      check=False)
    print(started.stdout, started.stderr)
    assert started.returncode == 0, started.stderr
    assert f"started market-orders@{session}-run" in started.stdout

    def second():
        attempts = scenario.ledger(first)["attempts"]
        return attempts if len(attempts) == 2 and attempts[1].get("result") else None

    attempts = box.wait_for(second, 30, "the forced attempt to finish", interval=0.3)
    assert [(a["attempt"], a["how"], a["result"]) for a in attempts] == [
        (1, "timer", "success"), (2, "forced", "success")]
    assert attempts[1]["by"] == "root"
    assert lines_sent(scenario) == ["sent attempt=1", "sent attempt=2"]
    # its ticket is spent: the one-off unit cannot force a third run
    unit = started.stdout.split()[1].rstrip(":")
    box.systemctl("start", unit, check=False)
    box.wait_for(lambda: box.show(unit, "ExecMainStatus") == "172" or None, 20,
                 "the spent ticket's refusal")
    assert lines_sent(scenario) == ["sent attempt=1", "sent attempt=2"]
