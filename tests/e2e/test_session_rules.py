"""A job with a session rule on a booted systemd: a timer exists for each chosen session and for
no other (issue 25). The chosen sessions are computed here from exchange_calendars directly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import exchange_calendars as xc
import pandas as pd
import pytest

from .scenario import UNIT_DIR, Scenario

pytestmark = pytest.mark.e2e

JOBS = """
[[job]]
name = "weekly"
calendar = "XNYS"
event = "close"
offset = "-10min"
command = ["/bin/true"]
[job.sessions]
period = "week"
from = "end"

[[job]]
name = "every"
calendar = "XNYS"
event = "close"
offset = "-10min"
command = ["/bin/true"]
"""


def week_ends(sessions: list) -> set:
    """XNYS sessions whose next session falls in a later week (Monday to Sunday)."""
    return {d for d, nxt in zip(sessions, sessions[1:], strict=False)
            if nxt.isocalendar()[:2] != d.isocalendar()[:2]}


def test_rule_job_has_a_timer_for_each_chosen_session_only(scenario: Scenario) -> None:
    box = scenario.box
    scenario.write_config([], horizon=10, extra=JOBS)
    scenario.sync()
    units = box.run(["ls", UNIT_DIR]).stdout.split()
    weekly = sorted(u for u in units if u.startswith("market-weekly@") and u.endswith(".timer"))
    every = sorted(u for u in units if u.startswith("market-every@") and u.endswith(".timer"))
    assert len(every) >= 9, every  # the control: a timer for (nearly) every one of 10 sessions

    today = datetime.now(UTC).date()
    cal = xc.get_calendar("XNYS", start=pd.Timestamp(today - timedelta(days=10)),
                          end=pd.Timestamp(today + timedelta(days=60)))
    sessions = [t.date() for t in cal.sessions]
    ends = week_ends(sessions)
    installed = {u.split("@")[1][:10] for u in weekly}
    planned = {u.split("@")[1][:10] for u in every}
    want = {d.isoformat() for d in ends if d.isoformat() in planned}
    assert installed == want, (installed, want, every)
    assert want, f"no week end among the planned sessions {sorted(planned)}"
    for unit in weekly:
        assert box.show(unit, "ActiveState") == "active", unit
        assert "(week end)" in box.show(unit, "Description"), unit
    table = box.run(["market-timers", "plan"]).stdout  # a line per fire, its session third
    rows = [r for r in table.splitlines() if r.startswith("weekly ")]
    assert {r.split()[2] for r in rows} == installed and all("week end" in r for r in rows)
    summary = box.run(["market-timers", "plan", "--summary"]).stdout  # a line per job
    [line] = [r for r in summary.splitlines() if r.startswith("weekly ")]
    assert "week end" in line and line.rstrip().endswith(f" {len(installed)}")
