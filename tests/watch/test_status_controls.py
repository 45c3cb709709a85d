"""`status` and `plan` show the operator controls: `requires` (the chain of each job, and a start
refused by it) and pauses (in force, and the sessions they held)."""

from __future__ import annotations

import json
from datetime import date

from market_timers import cli
from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import status

from .conftest import THANKSGIVING_CONFIG, utc

CHAIN = THANKSGIVING_CONFIG + """
[[job]]
name = "orders"
event = "close"
offset = "-10min"
command = ["/bin/true"]
requires = ["signal"]
"""


def test_status_shows_the_chain_and_the_upstream_of_a_refused_start(make_config, fake_systemctl,
                                                                    tmp_path, capsys):
    config = make_config(CHAIN)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    runrecord.update(config.state_dir, "signal", "2025-11-24", started_utc="2025-11-24T20:45:00Z",
                     result="exit-code", exit_status="3")
    runrecord.update(config.state_dir, "orders", "2025-11-24", refused="requires-unmet",
                     upstream="signal", upstream_state="failed (exit 3)",
                     started_utc="2025-11-24T20:50:00Z")
    now = utc("2025-11-26T12:00:00Z")
    fake_systemctl.now = now
    assert status.command(config, date(2025, 11, 24), True, now, systemctl=fake_systemctl) == 0
    jobs = {j["job"]: j for j in json.loads(capsys.readouterr().out)["sessions"][0]["jobs"]}
    assert jobs["orders"]["requires"] == ["signal"] and "requires" not in jobs["signal"]
    assert jobs["orders"]["result"] == "requires-unmet"
    assert (jobs["orders"]["upstream"], jobs["orders"]["upstream_state"]) == (
        "signal", "failed (exit 3)")
    assert status.command(config, date(2025, 11, 24), False, now, systemctl=fake_systemctl) == 0
    out = capsys.readouterr().out
    assert "requires unmet: signal failed (exit 3)" in out
    assert "orders requires signal" in out


def test_plan_notes_the_chain(make_config, capsys):
    path = make_config.write(CHAIN)
    code = cli.main(["--config", str(path), "--now", "2025-11-24T12:00:00Z", "plan"])
    assert code == 0
    out = capsys.readouterr().out
    assert "orders requires signal" in out


def test_status_shows_the_pause_in_force_and_the_paused_session(make_config, fake_systemctl,
                                                                tmp_path, capsys):
    config = make_config(THANKSGIVING_CONFIG)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    path = make_config.write(THANKSGIVING_CONFIG)
    assert cli.main(["--config", str(path), "pause", "signal", "--note", "broker down"]) == 0
    runrecord.update(config.state_dir, "signal", "2025-11-24", refused="paused",
                     scope="job signal", note="broker down", started_utc="2025-11-24T20:45:00Z")
    capsys.readouterr()
    now = utc("2025-11-26T12:00:00Z")
    fake_systemctl.now = now
    assert status.command(config, date(2025, 11, 24), False, now, systemctl=fake_systemctl) == 0
    out = capsys.readouterr().out
    assert "paused (broker down)" in out
    assert "paused: job signal" in out and "market-timers resume signal" in out


def test_status_shows_the_halt_in_force_and_the_halted_session(make_config, fake_systemctl,
                                                               tmp_path, capsys):
    from market_timers.controls import halt as halt_mod

    class NothingRuns:
        def running(self, patterns):
            return []

    config = make_config(THANKSGIVING_CONFIG)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    assert halt_mod.halt(config, "signal", None, False, "broker runaway", fake_systemctl.now,
                         systemctl=NothingRuns()) == 0
    runrecord.update(config.state_dir, "signal", "2025-11-24", refused="halted",
                     scope="job signal", reason="broker runaway",
                     started_utc="2025-11-24T20:45:00Z")
    capsys.readouterr()
    now = utc("2025-11-26T12:00:00Z")
    fake_systemctl.now = now
    assert status.command(config, date(2025, 11, 24), False, now, systemctl=fake_systemctl) == 0
    out = capsys.readouterr().out
    assert "halted (broker runaway)" in out
    assert "halted: job signal" in out and "market-timers resume signal" in out
    assert status.command(config, date(2025, 11, 24), True, now, systemctl=fake_systemctl) == 0
    doc = json.loads(capsys.readouterr().out)
    [halt] = doc["halts"]
    assert halt["scope"] == "job" and halt["name"] == "signal"
    assert halt["reason"] == "broker runaway" and halt["by"]
