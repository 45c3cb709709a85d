"""Told, every time (issue 45) on a real systemd: a failure after a recovered one and two sessions
failing in a row are each alerted (inside the dedup window: an incident is the occurrence, not the
job); a halt is one alert id on every channel, `market-timers alerts` lists it with the command
that acks it, and `resume` resolves it on every channel with no repeat after it."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest

from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e


def _config(scenario: Scenario, job: Job, **alerts) -> None:
    text = scenario.config_text([job])
    for key, value in alerts.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    scenario.jobs = [job]
    scenario.box.write_file("/etc/market-timers/market-timers.toml", text)


def test_a_failure_after_a_recovered_one_and_two_failed_sessions_are_each_alerted(
        scenario: Scenario) -> None:
    """Seen: a failure, its recovery, then real failures of two sessions reached no channel; the
    digest said "Alerts: (none) + 2 repeat(s) folded"."""
    box = scenario.box
    failing = Job("told", instant_in(3600), ["fail", "3"])
    scenario.forget_runs(failing)
    days = [(failing.session - timedelta(days=n)).isoformat() for n in (2, 1, 0)]

    def run(session: str, *extra: str) -> str:
        done = box.run(["market-timers", "run", "told", "--session", session, "--yes", *extra],
                       timeout=60)
        print(done.stdout, done.stderr)
        return done.stdout

    def failed(session: str) -> dict:
        return scenario.wait_message("telegram", "told failed with exit status 3",
                                     f"session: {session}\n", timeout=40,
                                     poll=scenario.flush_outbox)

    _config(scenario, failing, dedup_minutes=30)
    scenario.sync()
    run(days[0])
    first = failed(days[0])["text"]
    assert "host: " in first
    _config(scenario, Job("told", failing.instant, ["ok"]), dedup_minutes=30)
    run(days[0], "--force")
    recovered = scenario.wait_message("telegram", "told recovered", timeout=40,
                                      poll=scenario.flush_outbox)["text"]
    assert recovered.startswith("[RESOLVED] ")
    _config(scenario, failing, dedup_minutes=30)
    for session in days[1:]:  # two sessions failing in a row, inside the dedup window
        run(session)
        failed(session)
    titles = [m["text"].splitlines()[0] for m in scenario.messages("telegram", "job: told")]
    print(titles)
    assert len([t for t in titles if "told failed" in t]) == 3
    listed = box.run(["market-timers", "alerts"]).stdout
    print(listed)
    for session in days[1:]:
        [line] = [x for x in listed.splitlines() if f"told {session}" in x]
        assert re.search(r"market-timers ack \d{4}-[0-9a-f]{8}$", line)


def test_resume_resolves_the_halt_on_every_channel_and_it_never_repeats(
        scenario: Scenario) -> None:
    """Seen: "HALT (repeat 1)" to Telegram, Slack and email 14 minutes after the halt was lifted;
    three alert ids to acknowledge one by one."""
    box = scenario.box
    orders = Job("told-orders", instant_in(3600), ["ok"], {"orders": True})
    _config(scenario, orders, repeat_minutes=1)
    scenario.sync()
    try:
        box.run(["market-timers", "halt", "--reason", "e2e told"])
        ids = set()
        for channel in ("telegram", "slack"):
            text = scenario.wait_message(channel, "HALT: order jobs", timeout=30,
                                         poll=scenario.flush_outbox)["text"]
            ids.add(re.search(r"alert id: (\S+)", text)[1])
        [halt_id] = ids  # one incident, one id, on every channel
        listed = box.run(["market-timers", "alerts"]).stdout
        print(listed)
        assert f"market-timers ack {halt_id}" in listed
        box.run(["market-timers", "resume"])
        for channel in ("telegram", "slack"):
            lifted = scenario.wait_message(channel, "halt lifted", timeout=30,
                                           poll=scenario.flush_outbox)["text"]
            assert f"The HALT alert {halt_id} is resolved" in lifted
        time.sleep(65)  # past repeat_minutes: the outbox timer would have queued a repeat
        scenario.flush_outbox()
        for channel in ("telegram", "slack"):
            assert scenario.messages(channel, "(repeat") == []
        assert halt_id not in box.run(["market-timers", "alerts"]).stdout
    finally:
        box.run(["market-timers", "resume"], check=False)
