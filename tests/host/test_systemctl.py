"""host/systemctl.py against a stand-in `systemctl` program: how many units each call carries, how
unit states are read, and what a failure says (at a thousand jobs: 10,000 timers)."""

from __future__ import annotations

import json
import sys

import pytest

from market_timers.host.systemctl import CHUNK, Systemctl, SystemctlError

FAKE = r'''
import json, sys
from pathlib import Path
here = Path(__file__).parent
args = sys.argv[1:]
with open(here / "calls.jsonl", "a") as f:
    f.write(json.dumps(args) + "\n")
units = args[args.index("--") + 1:] if "--" in args else []
fail = set((here / "fail").read_text().split()) if (here / "fail").exists() else set()
if args[0] == "start":
    bad = [u for u in units if u in fail]
    for u in bad:
        print(f"Failed to start {u}: No buffer space available", file=sys.stderr)
    sys.exit(1 if bad else 0)
if args[0] == "list-units":
    print((here / "listed").read_text(), end="")
'''


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "systemctl.py"
    script.write_text(FAKE)
    (tmp_path / "listed").write_text("")

    def calls() -> list[list[str]]:
        log = tmp_path / "calls.jsonl"
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

    return Systemctl((sys.executable, str(script))), calls, tmp_path


def timers(n: int) -> list[str]:
    return [f"market-job{i // 10:04d}@2026-12-{7 + i % 10:02d}-143000.timer" for i in range(n)]


def test_a_thousand_jobs_timers_are_started_in_bounded_chunks(fake):
    """One `systemctl start` of 10,000 units overflows the D-Bus client's signal queue near
    7,900 starts ("No buffer space available"): no call carries more than CHUNK units."""
    sc, calls, _ = fake
    sc.start(timers(1200))
    starts = [c for c in calls() if c[0] == "start"]
    sizes = [len(c) - c.index("--") - 1 for c in starts]
    assert sum(sizes) == 1200 and max(sizes) <= CHUNK == 500 and len(starts) == 3
    assert all("--no-block" in c for c in starts)


def test_stops_are_chunked_too(fake):
    sc, calls, _ = fake
    sc.stop(timers(1001))
    sizes = [len(c) - c.index("--") - 1 for c in calls() if c[0] == "stop"]
    assert sizes == [500, 500, 1]


def test_a_failed_chunk_does_not_keep_the_others_from_starting_and_the_error_is_short(fake):
    sc, calls, tmp = fake
    names = timers(1200)
    bad = names[100:110] + names[700:1000]  # 310 failures in two chunks
    (tmp / "fail").write_text("\n".join(bad))
    with pytest.raises(SystemctlError) as e:
        sc.start(names)
    assert len([c for c in calls() if c[0] == "start"]) == 3  # the third chunk was still sent
    message = str(e.value)
    assert len(message) < 1000 and "\n" not in message
    assert "310 of 1200 units" in message and names[100] in message
    assert "No buffer space available" in message
    assert e.value.failed == bad


def test_states_of_many_timers_are_read_with_one_list_units_call(fake):
    """`systemctl show` of every timer made PID 1 load and describe each (139-268 s after a
    reload at 10,000 timers): the states come from one list-units of the market-* timers."""
    sc, calls, tmp = fake
    names = timers(1000)
    (tmp / "listed").write_text(
        f"{names[0]} loaded active waiting Run job0000\n"
        f"{names[1]} loaded inactive dead Run job0000\n"
        "market-other@2026-12-07-143000.timer loaded active elapsed x\n")
    got = sc.show(names, ["ActiveState", "LoadState", "SubState"])
    assert [c[0] for c in calls()] == ["list-units"]
    assert "--all" in calls()[0] and calls()[0][-1] == "market-*.timer"
    assert got[names[0]] == {"Id": names[0], "LoadState": "loaded", "ActiveState": "active",
                             "SubState": "waiting"}
    assert got[names[1]]["ActiveState"] == "inactive"
    # not loaded: systemd has not read its file (list-units lists loaded units only)
    assert got[names[2]] == {"Id": names[2], "LoadState": "not-loaded",
                             "ActiveState": "inactive", "SubState": "dead"}
    assert "market-other@2026-12-07-143000.timer" not in got and len(got) == 1000


def test_the_states_of_a_few_units_are_asked_by_name(fake):
    """The dead-man reads the few timers whose window is open: PID 1 matches them by name; one
    it does not hold is then asked with show (which tells a missing file from an unloaded one)."""
    sc, calls, tmp = fake
    names = timers(3)
    (tmp / "listed").write_text(f"{names[0]} loaded active waiting Run job0000\n")
    got = sc.show(names, ["ActiveState"])
    first, second = calls()
    assert first[0] == "list-units" and first[first.index("--") + 1:] == names
    assert second[0] == "show" and second[second.index("--") + 1:] == names[1:]
    assert got[names[0]]["ActiveState"] == "active"


def test_other_properties_are_still_read_with_show(fake):
    sc, calls, _ = fake
    sc.show(["market-a@2026-12-07-143000.service"], ["Environment"])
    assert calls()[0][0] == "show"


def test_the_error_of_a_failed_start_names_the_command_not_every_unit(fake):
    sc, _, tmp = fake
    (tmp / "fail").write_text("\n".join(timers(600)))
    with pytest.raises(SystemctlError) as e:
        sc.start(timers(600))
    assert str(e.value).startswith("systemctl start: 600 of 600 units did not start")
    assert str(e.value).count("market-job") <= 3 and "(597 more)" in str(e.value)
