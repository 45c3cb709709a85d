"""The seed's every-minute cycle on a real systemd, time-compressed: every 6 s, a run that takes
9 s for a stretch and then 3 s (issue 14; 10 s, 15 s and 5 s before issue 40: the same overlaps
in a third of the window).

What a user must see: never two copies (the job's own log has no overlapping intervals), every slot
either ran or is recorded skipped, no replay after the slow stretch (each run starts at its own
slot), one warning for the session with the skip count, and no critical.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from .scenario import JOB_HOME, JOBS_DIR, STATE_DIR, Scenario, instant_in, iso
from .test_watch import start_deadman

pytestmark = pytest.mark.e2e

EVERY = 6  # a period must divide a minute
SLOTS = 10
SLOW = 9  # a run of the slow stretch ends 3 s after the next slot (more than grace), 3 s before
FAST = 3  # the one after
GRACE = 2
SLOW_FOR = 30  # runs starting within 30 s of the first slot (slots 0, 2, 4) are slow
LOG = f"{JOB_HOME}/e2e-cycle.log"  # the job user's home: writable by the job
CYCLE = f"{JOBS_DIR}/cycle"
# The job: its own log of start/end (a file, not the journal: journald may attribute a line of a
# process that exits right after logging to no unit, systemd#2913).
CYCLE_SCRIPT = f'''#!/opt/venvs/market-timers/bin/python3
import os
import sys
import time

start = time.time()
slow_until = float(sys.argv[1])
with open("{LOG}", "a") as log:
    log.write(f"start {{start:.3f}} slot {{os.environ['MARKET_SLOT_UTC']}}\\n")
time.sleep({SLOW} if start < slow_until else {FAST})
with open("{LOG}", "a") as log:
    log.write(f"end {{time.time():.3f}} slot {{os.environ['MARKET_SLOT_UTC']}}\\n")
'''


def test_every_6s_cycle_with_a_slow_stretch_never_overlaps_and_counts_its_skips(
    scenario: Scenario,
) -> None:
    box = scenario.box
    first = instant_in(8)
    last = first + timedelta(seconds=EVERY * (SLOTS - 1))
    session = first.date().isoformat()
    midnight = datetime.combine(first.date(), datetime.min.time(), tzinfo=UTC)
    start_off = int((first - midnight).total_seconds())
    box.write_file(CYCLE, CYCLE_SCRIPT, mode=0o755)
    box.run(["rm", "-f", LOG])
    job = f'''
[[job]]
name = "cycle"
every = "{EVERY}s"
from = "open+{start_off}s"
until = "open+{start_off + EVERY * (SLOTS - 1)}s"
command = ["{CYCLE}", "{first.timestamp() + SLOW_FOR}"]
lock = "orders"
grace = "{GRACE}s"
severity = "critical"
'''
    scenario.write_config([], horizon=1, extra=job)
    out = scenario.sync()
    print(out)
    started = [line for line in out.splitlines() if line.startswith("start market-cycle@")]
    assert len(started) == 1, f"one timer for the session's {SLOTS} slots:\n{out}"
    timer = started[0].split()[1]
    assert datetime.now(UTC) < first, "sync finished after the first slot: raise the lead"
    plan = json.loads(box.run(["market-timers", "plan", "--json"]).stdout)
    slots = [e["slot"] for e in plan if e["job"] == "cycle" and e["session"] == session]
    assert slots == [iso(first + timedelta(seconds=EVERY * k)) for k in range(SLOTS)]

    # The window passes; the last run's ExecStopPost= and handlers settle.
    time.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds()) + 8)
    box.wait_for(lambda: box.systemctl("is-active", timer.replace(".timer", ".service"),
                                       check=False).stdout.strip() != "active", 30,
                 "the last run to end")
    time.sleep(3)

    # 1. Never two copies: the job's own start/end intervals do not overlap.
    lines = box.run(["cat", LOG]).stdout.split("\n")
    events = [line.split() for line in lines if line]
    starts = [(float(t), slot) for kind, t, _, slot in events if kind == "start"]
    ends = [(float(t), slot) for kind, t, _, slot in events if kind == "end"]
    print("\n".join(lines))
    assert [s for _, s in starts] == [s for _, s in ends], "a run did not finish"
    intervals = sorted((a, b) for (a, _), (b, _) in zip(starts, ends, strict=True))
    for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
        assert start >= end, f"two copies at once: {intervals}"

    # 2. No replay after the slow stretch: each run starts at its own slot (within its grace,
    # the runner's own bound; how soon is bench/'s to measure, on a quiet machine), not at the
    # end of the run before.
    for t, slot in starts:
        delay = t - datetime.fromisoformat(slot.replace("Z", "+00:00")).timestamp()
        assert 0 <= delay < GRACE, f"the run of {slot} started {delay:.2f} s after it"
    ran = [slot for _, slot in starts]
    # 9 s runs at slots 0, 2, 4 swallow 1, 3, 5; from slot 6 on every slot runs (3 s).
    assert ran == [slots[k] for k in (0, 2, 4, *range(6, SLOTS))], ran

    # 3. Every slot ran or is recorded skipped.
    listing = box.run(["sh", "-c", f"cat {STATE_DIR}/runs/cycle/{session}/*.json"]).stdout
    records = {r["slot"]: r for r in map(json.loads, listing.splitlines())}
    assert set(records) == set(slots), sorted(set(slots) - set(records))
    not_run = sorted(s for s in slots if s not in ran)
    assert not_run == [slots[1], slots[3], slots[5]]
    # A slot that comes during a run starts nothing; when the run ends systemd 252 starts the
    # service once more at once, and the runner refuses that start, 3 s late > grace 2 s (the
    # ledger keeps the refusal). The slot's record says "overlap" when the ExecStopPost= count
    # ran first, "stale-start" when the refused start did: either way not run, never replayed.
    print({s: (records[s].get("refused"), records[s].get("skipped")) for s in not_run})
    assert all(records[s].get("refused") == "stale-start" or records[s].get("skipped") == "overlap"
               for s in not_run)
    assert all(records[s].get("result") == "success" for s in ran)
    # The run ledger holds one claim per ran slot, (job, session, slot), finished by --record.
    # (a refused start has a key directory too, with a refused-* entry and no attempt-1)
    keys = box.run(["sh", "-c", f"cd {STATE_DIR}/ledger/cycle && ls {session}+*/attempt-1"]
                   ).stdout
    names = {s.replace("-", "").replace(":", ""): s for s in slots}
    claimed = sorted(k.split("+", 1)[1].split("/")[0] for k in keys.split()
                     if k.split("+", 1)[1].split("/")[0] in names)  # this run's (a rerun the
    # same day shares the session)
    assert claimed == sorted(s.replace("-", "").replace(":", "") for s in ran)
    first_key = f"{STATE_DIR}/ledger/cycle/{session}+{claimed[0]}"
    assert "result=success" in box.run(["cat", f"{first_key}/attempt-1.result"]).stdout

    # 4. One warning for the session, with the count; no critical; status counts all three.
    warning = scenario.wait_message("slack", "cycle: slots skipped", timeout=60)["text"]
    print(warning)
    assert warning.startswith("[WARNING]")
    # the longest run, rounded: 9 s and the job's own start (10 on a crowded host)
    assert re.search(rf"of {SLOTS} slots skipped so far, the run takes (9|10) s against a "
                     rf"{EVERY} s period", warning), warning
    time.sleep(2)
    assert len(scenario.messages("slack", "cycle")) == 1
    assert scenario.messages("telegram", "cycle") == []
    doc = json.loads(box.run(["market-timers", "status", "--json", "--session", session]).stdout)
    row = next(j for s in doc["sessions"] for j in s["jobs"] if j["job"] == "cycle")
    print(row)
    assert (row["slots"]["ran"], row["slots"]["skipped"], row["slots"]["total"]) == \
        (SLOTS - 3, 3, SLOTS)


def test_a_session_missed_whole_with_the_host_off_is_alerted_and_status_says_missed(
    scenario: Scenario,
) -> None:
    """The host is off for the whole of a session's window and boots after it: the one start
    that Persistent=true makes at boot is refused (stale), the dead-man's first pass raises the
    cycle's miss (critical, once) and status calls the session missed. (Days later instead of
    seconds: tests/watch/test_periodic_deadman.py, with the pass's clock.) The test starts the
    dead-man's passes itself (the packaged unit, as its timer would a minute apart)."""
    box = scenario.box
    slots = 4
    every = 5
    first = instant_in(45)
    last = first + timedelta(seconds=every * (slots - 1))
    session = first.date().isoformat()
    midnight = datetime.combine(first.date(), datetime.min.time(), tzinfo=UTC)
    start_off = int((first - midnight).total_seconds())
    job = f'''
[[job]]
name = "cycle"
every = "{every}s"
from = "open+{start_off}s"
until = "open+{start_off + every * (slots - 1)}s"
command = ["/bin/true"]
grace = "3s"
severity = "warning"
'''
    scenario.write_config([], horizon=1, extra=job)
    out = scenario.sync()
    assert any(line.startswith("start market-cycle@") for line in out.splitlines()), out
    assert datetime.now(UTC) < first, "sync finished after the first slot: raise the lead"
    box.poweroff()
    assert datetime.now(UTC) < first, "the poweroff ended after the first slot: raise the lead"
    time.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds()) + 5)
    box.boot()
    start_deadman(box)
    alert = scenario.wait_message("telegram", "cycle", timeout=150)
    print(alert)
    assert "[CRITICAL]" in alert["text"] and "ran none of its 4 slots" in alert["text"], alert
    doc = json.loads(box.run(["market-timers", "status", "--json", "--session", session]).stdout)
    row = next(j for s in doc["sessions"] for j in s["jobs"] if j["job"] == "cycle")
    print(row)
    assert row["result"] == "missed: none of its 4 slots ran"
    start_deadman(box)  # another dead-man pass: the miss is not said again, and no skip warning
    scenario.flush_outbox()
    time.sleep(3)
    assert len(scenario.messages("telegram", "cycle")) == 1
    for channel in ("telegram", "slack"):
        assert scenario.messages(channel, "slots skipped") == []


def test_cmes_close_shared_with_the_next_open_is_in_one_timer_only(scenario: Scenario) -> None:
    """CMES sessions touch (17:00 Chicago closes one and opens the next): of the two session
    timers systemd holds, exactly one elapses at that instant, as systemd itself computes their
    OnCalendar= lines. The instant comes from exchange_calendars directly."""
    import exchange_calendars as xc

    box = scenario.box
    job = '''
[[job]]
name = "futures"
calendar = "CMES"
every = "1h"
command = ["/bin/true"]
'''
    scenario.write_config([], horizon=3, extra=job)  # three sessions: two of them touch
    print(scenario.sync())
    plan = json.loads(box.run(["market-timers", "plan", "--json"]).stdout)
    units = sorted({e["unit"]: e["session"] for e in plan if e["job"] == "futures"}.items(),
                   key=lambda kv: kv[1])
    assert len(units) >= 2, units
    cal = xc.get_calendar("CMES", start="2020-01-01")
    checked = 0
    for (unit_a, session_a), (unit_b, _) in zip(units, units[1:], strict=False):
        close = cal.session_close(session_a).to_pydatetime()
        next_open = cal.session_open(cal.next_session(session_a)).to_pydatetime()
        if close != next_open:  # a weekend or a holiday between them: nothing shared
            continue
        elapses = {}
        for unit in (unit_a, unit_b):
            timer = unit.replace(".service", ".timer") if unit.endswith(".service") else unit
            lines = [line.split("=", 1)[1] for line in box.systemctl("cat", timer).stdout
                     .splitlines() if line.startswith("OnCalendar=")]
            assert box.show(timer, "ActiveState") == "active", timer
            got = set()
            for spec in lines:  # systemd's own reading of each line: its next 60 elapses
                text = box.run(["env", "TZ=UTC", "systemd-analyze", "calendar",
                                "--iterations=60", spec]).stdout
                got |= {line.split(":", 1)[1].strip() for line in text.splitlines()
                        if line.strip().startswith(("Next elapse:", "Iter. #"))}
            elapses[unit] = got
        shared = f"{close:%a %Y-%m-%d %H:%M:%S} UTC"
        print(unit_a, unit_b, shared)
        assert shared not in elapses[unit_a] and shared in elapses[unit_b], elapses
        assert not elapses[unit_a] & elapses[unit_b]
        checked += 1
    assert checked >= 1, f"no two touching sessions in the plan: {units}"
