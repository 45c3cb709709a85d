"""A paused periodic job on a real systemd (issue 45, item 5): its refused slots are held, not
skipped, so no channel hears of them (the paused start is info for the digest), and resuming it
after a pause longer than its stall_after brings no stall alert (nor a "recovered" after one).

Seen on Debian 12 before: the first paused slot sent "slots skipped … refused (late or lock
busy)" to the warning channel; the resume brought a critical "did not run" and then a recovery."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from .scenario import STATE_DIR, Scenario, instant_in
from .test_watch import start_deadman

pytestmark = pytest.mark.e2e

EVERY = 5
SLOTS = 14  # 65 s: two slots run, five are paused (25 s > stall_after), the rest run
STALL_AFTER = 15
LEAD = 15  # seconds from now to the first slot: time to sync


def _sleep_until(instant: datetime) -> None:
    time.sleep(max(0.0, (instant - datetime.now(UTC)).total_seconds()))


def test_a_paused_periodic_job_warns_no_one_and_its_resume_is_no_stall(scenario: Scenario):
    box = scenario.box
    first = instant_in(LEAD)
    session = first.date().isoformat()
    midnight = datetime.combine(first.date(), datetime.min.time(), tzinfo=UTC)
    start_off = int((first - midnight).total_seconds())
    job = f'''
[[job]]
name = "pheld"
every = "{EVERY}s"
from = "open+{start_off}s"
until = "open+{start_off + EVERY * (SLOTS - 1)}s"
command = ["/bin/true"]
grace = "2s"
stall_after = "{STALL_AFTER}s"
severity = "critical"
'''
    scenario.write_config([], horizon=1, extra=job)
    out = scenario.sync()
    assert any(line.startswith("start market-pheld@") for line in out.splitlines()), out
    assert datetime.now(UTC) < first, "sync finished after the first slot: raise the lead"
    try:
        _sleep_until(first + timedelta(seconds=EVERY + 2))  # slots 0 and 1 ran
        box.run(["market-timers", "pause", "pheld", "--note", "e2e hold"])
        _sleep_until(first + timedelta(seconds=6 * EVERY + 2))  # slots 2..6 refused: 25 s
        start_deadman(box)  # a pass while it is paused: held, not missed
        box.run(["market-timers", "resume", "pheld"])
        start_deadman(box)  # the pass right after the resume: no stall
        _sleep_until(first + timedelta(seconds=8 * EVERY + 3))  # slots 7 and 8 ran
        start_deadman(box)
        last = first + timedelta(seconds=EVERY * (SLOTS - 1))
        _sleep_until(last + timedelta(seconds=4))
        start_deadman(box)
        scenario.flush_outbox()
        time.sleep(2)

        listing = box.run(["sh", "-c", f"cat {STATE_DIR}/runs/pheld/{session}/*.json"]).stdout
        records = sorted((r["slot"], r) for r in map(json.loads, listing.splitlines()))
        print("\n".join(f"{s} refused={r.get('refused')} skipped={r.get('skipped')} "
                        f"result={r.get('result')}" for s, r in records))
        paused = [s for s, r in records if r.get("refused") == "paused"]
        assert len(paused) >= 4, "the pause held the slots of its 25 s"
        assert any(r.get("result") == "success" and s > max(paused) for s, r in records), \
            "a slot ran after the resume"
        for channel in ("slack", "telegram"):
            said = scenario.messages(channel, "pheld")
            assert said == [], f"{channel} was told: {[m['text'] for m in said]}"
        doc = json.loads(box.run(["market-timers", "status", "--json", "--session",
                                  session]).stdout)
        row = next(j for s in doc["sessions"] for j in s["jobs"] if j["job"] == "pheld")
        print(row)
        assert row["slots"]["held"] == len(paused) and "held" in row["result"]
    finally:
        box.run(["market-timers", "resume", "pheld"], check=False)
