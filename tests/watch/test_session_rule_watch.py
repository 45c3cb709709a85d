"""A job with a session rule, synced: plan.json, the timers, the dead-man and status expect its
run on the chosen session only (the month's last, 2025-11-28), never on the others of the week."""

from __future__ import annotations

import json

from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman, status

from .conftest import THANKSGIVING_CONFIG, utc

RULE = THANKSGIVING_CONFIG + """
[[job]]
name = "rebalance"
event = "close"
offset = "-30min"
command = ["/bin/true"]
grace = "2min"
timeout = "5min"
[job.sessions]
period = "month"
"""


def synced(make_config, fake_systemctl):
    config = make_config(RULE)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    return config


def test_only_the_chosen_session_is_planned_and_has_a_timer(make_config, fake_systemctl):
    config = synced(make_config, fake_systemctl)
    plan = json.loads((config.state_dir / "plan.json").read_text())
    mine = [(e["session"], e["selected"]) for e in plan["fires"] if e["job"] == "rebalance"]
    assert mine == [("2025-11-28", "month end")]
    timers = sorted(p.name for p in (config.unit_dir).glob("market-rebalance@*.timer"))
    assert timers == ["market-rebalance@2025-11-28-173000.timer"]


def test_deadman_never_expects_a_run_on_the_other_sessions(make_config, fake_systemctl, alerts):
    config = synced(make_config, fake_systemctl)
    for now in ("2025-11-24T23:00:00Z", "2025-11-25T23:00:00Z", "2025-11-26T23:00:00Z",
                "2025-11-28T17:00:00Z"):
        fake_systemctl.now = utc(now)
        result = deadman.run_pass(config, utc(now), systemctl=fake_systemctl, alert=alerts, env={})
        assert [f for f in result.findings if "rebalance" in f.key] == [], now
    fake_systemctl.now = utc("2025-11-28T23:00:00Z")  # the chosen session did not run: missed
    result = deadman.run_pass(config, fake_systemctl.now, systemctl=fake_systemctl,
                              alert=alerts, env={})
    keys = [f.key for f in result.findings if "rebalance" in f.key]
    assert len(keys) == 1 and "2025-11-28" in keys[0]


def test_status_lists_the_rule_job_on_its_session_only(make_config, fake_systemctl, capsys):
    config = synced(make_config, fake_systemctl)
    assert status.command(config, None, True, utc("2025-11-24T12:00:00Z"),
                          systemctl=fake_systemctl) == 0
    doc = json.loads(capsys.readouterr().out)
    where = {s["session"]: [j["job"] for j in s["jobs"]] for s in doc["sessions"]}
    assert all("rebalance" not in jobs for day, jobs in where.items() if day != "2025-11-28")
    assert "rebalance" in where.get("2025-11-28", [])
