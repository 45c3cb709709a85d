"""Alert delivery through the durable outbox while Telegram is down (issue 5, case 7)."""

from __future__ import annotations

import re

import pytest

from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e


def test_alerts_raised_while_telegram_answers_503_are_delivered_once_it_recovers(
    scenario: Scenario,
) -> None:
    api = scenario.api
    api.fail_next("telegram", 503, times=1000)  # down until the script is cleared
    instant = instant_in(6)
    jobs = [Job("outage-a", instant, ["fail", "1"]), Job("outage-b", instant, ["fail", "2"])]
    scenario.schedule(jobs)
    for job in jobs:
        scenario.wait_finished(job, 30)

    def tried_and_pending() -> list[dict]:
        rows = [r for r in scenario.outbox() if r["job"] in ("outage-a", "outage-b")]
        if len(rows) == 2 and all(r["attempts"] >= 1 for r in rows):
            return rows
        scenario.flush_outbox()  # a handler that found the outbox busy left its alert to it
        return []

    pending = scenario.box.wait_for(tried_and_pending, 30, "both alerts tried and spooled",
                                    interval=0.5)
    for row in pending:
        assert row["state"] == "pending" and "503" in row["last_error"], row
    scenario.flush_outbox()
    assert scenario.messages("telegram", "outage-") == []

    with api.lock:  # Telegram is back
        api.script.clear()
    for row in pending:  # the retry waits for its backoff (30 s after the first attempt)
        scenario.wait_message("telegram", f"alert id: {row['id']}", timeout=120,
                              poll=scenario.flush_outbox)
    scenario.flush_outbox()
    received = [re.search(r"alert id: (\S+)", m["text"])[1]
                for m in scenario.messages("telegram", "outage-")]
    assert sorted(received) == sorted(r["id"] for r in pending)  # each once, none lost
    assert [r for r in scenario.outbox() if r["job"].startswith("outage-")] == []
