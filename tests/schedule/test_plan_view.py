"""What `plan` prints for a periodic job (issue 27): one line per session by default, every slot
with --slots; --summary with the exchange's local time. Expected times from NYSE's published
hours (09:30-16:00 New York, 13:00 on 2026-12-24; EST = UTC-5), not from the code under test."""

from __future__ import annotations

import json

from market_timers import cli

CYCLE = """
calendar = "XNYS"

[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-10min"
command = ["/usr/bin/true"]
grace = "20s"

[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""
DAY = ["--from", "2026-12-24", "--to", "2026-12-24"]


def plan(write_config, capsys, *extra) -> list[str]:
    path = write_config(CYCLE)
    assert cli.main(["--config", str(path), "plan", *DAY, *extra]) == 0
    return capsys.readouterr().out.splitlines()


def test_plan_collapses_a_periodic_job_to_one_line_per_session(write_config, capsys):
    lines = plan(write_config, capsys)
    cycle = [x for x in lines if x.startswith("cycle")]
    assert len(lines) == 3 and len(cycle) == 1  # header, cycle, signal
    [row] = cycle
    assert "every 1min" in row and "196 slots" in row
    assert "Thu 2026-12-24 14:35:00-17:50:00" in row
    assert "Thu 09:35:00-12:50:00 EST" in row
    assert any(x.startswith("signal") and "Thu 12:45:00 EST" in x for x in lines)


def test_plan_slots_lists_every_slot_of_a_periodic_job(write_config, capsys):
    lines = plan(write_config, capsys, "--slots")
    assert len([x for x in lines if x.startswith("cycle")]) == 196
    assert any(x.startswith("cycle") and "Thu 12:50:00 EST" in x for x in lines)


def test_plan_json_keeps_one_entry_per_slot(write_config, capsys):
    entries = json.loads("\n".join(plan(write_config, capsys, "--json")))
    assert len([e for e in entries if e["job"] == "cycle"]) == 196


def test_plan_summary_has_the_exchange_local_time(write_config, capsys):
    lines = plan(write_config, capsys, "--summary")
    assert "EXCHANGE TIME" in lines[0]
    [cycle] = [x for x in lines if x.startswith("cycle")]
    [signal] = [x for x in lines if x.startswith("signal")]
    assert "09:35-12:50 EST" in cycle
    assert "12:45 EST" in signal
