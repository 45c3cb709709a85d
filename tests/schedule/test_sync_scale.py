"""sync at a thousand jobs (issue 46): a start that fails for some timers leaves the rest
installed and plan.json written, says so in one short line, and the next sync starts only what is
missing; a sync with nothing to change writes nothing; one job's change reloads once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from market_timers.config import loader as config
from market_timers.host.systemctl import SystemctlError
from market_timers.schedule import sync

JOBS = """
calendar = "XNYS"
horizon = 3
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
[[job]]
name = "orders"
event = "open"
offset = "+5min"
command = ["/usr/bin/true"]
"""
WED = datetime(2025, 11, 26, 12, 0, tzinfo=UTC)


class Systemctl:
    """Starts all but the units in `refuse` (as a chunked start does: every chunk is sent)."""

    def __init__(self, refuse=()):
        self.refuse = set(refuse)
        self.active: set[str] = set()
        self.started: list[str] = []
        self.reloads = 0

    def show(self, units, props):
        return {u: {"ActiveState": "active" if u in self.active else "inactive"} for u in units}

    def start(self, units):
        self.started += units
        self.active |= set(units) - self.refuse
        failed = [u for u in units if u in self.refuse]
        if failed:
            raise SystemctlError(f"systemctl start: {len(failed)} of {len(units)} units did not "
                                 "start: Failed to start x: No buffer space available", failed)

    def stop(self, units):
        self.active -= set(units)

    def reset_failed(self, units):
        pass

    def daemon_reload(self):
        self.reloads += 1


def timers(cfg) -> list[str]:
    return sorted(p.name for p in cfg.unit_dir.glob("market-*.timer"))


def test_a_start_that_fails_for_some_timers_leaves_the_rest_and_plan_json(write_config, tmp_path):
    cfg = config.load(write_config(JOBS))
    refused = ["market-orders@2025-11-28-143500.timer", "market-signal@2025-12-01-204500.timer"]
    sc = Systemctl(refuse=refused)
    with pytest.raises(SystemctlError) as e:
        sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    assert "2 of 6 units did not start" in str(e.value)
    assert "market-timers sync again starts them" in str(e.value)
    assert len(timers(cfg)) == 6 and len(sc.active) == 4  # all written, the rest started
    plan = json.loads((cfg.state_dir / "plan.json").read_text())
    units = {e["unit"] for e in plan["fires"]}
    assert set(refused) <= units and len(units) == 6  # the dead-man knows every planned fire
    sc.refuse.clear()
    sc.started.clear()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    assert sorted(sc.started) == refused and len(sc.active) == 6  # only what was missing


def test_the_cli_says_a_failed_start_in_one_short_line_and_exits_1(write_config, tmp_path,
                                                                    capsys, monkeypatch):
    from market_timers import cli

    path = write_config(JOBS)
    monkeypatch.setattr(sync, "Systemctl",
                        lambda: Systemctl(refuse=["market-signal@2025-11-26-204500.timer"]))
    assert cli.main(["--config", str(path), "--now", "2025-11-26T12:00:00Z", "sync"]) == 1
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if "did not start" in x]
    assert line.startswith("market-timers sync: systemctl start: 1 of 6 units did not start")
    assert len(line) < 1000 and "Traceback" not in err


def test_an_unchanged_sync_writes_no_file_and_does_not_reload(write_config, tmp_path):
    cfg = config.load(write_config(JOBS))
    sc = Systemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")

    def files():
        return {p: (p.stat().st_ino, p.stat().st_mtime_ns)
                for d in (cfg.unit_dir, cfg.state_dir) for p in d.rglob("*")}

    before = files()
    sc.started.clear()
    result = sync.sync(cfg, now=WED + timedelta(minutes=5), systemctl=sc,
                       stamp_dir=tmp_path / "stamps")
    assert result.lines() == ["nothing to do"] and sc.reloads == 0 and sc.started == []
    assert files() == before  # plan.json too: generated_utc is when a sync last changed one


def test_a_plan_that_changed_is_written_with_the_time_it_changed(write_config, tmp_path):
    """A day later (Thanksgiving: closed) 2025-12-02 has entered the horizon: plan.json is
    written again with that sync's time, the fires of the session that passed kept."""
    cfg = config.load(write_config(JOBS))
    sc = Systemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    later = datetime(2025, 11, 27, 12, 0, tzinfo=UTC)  # Thanksgiving: XNYS closed
    sync.sync(cfg, now=later, systemctl=sc, stamp_dir=tmp_path / "stamps")
    plan = json.loads((cfg.state_dir / "plan.json").read_text())
    assert plan["generated_utc"] == "2025-11-27T12:00:00Z"
    assert {e["session"] for e in plan["fires"]} == {"2025-11-26", "2025-11-28", "2025-12-01",
                                                     "2025-12-02"}


def test_one_jobs_change_rewrites_its_units_only_with_one_reload(write_config, tmp_path):
    path = write_config(JOBS)
    sc = Systemctl()
    sync.sync(config.load(path), now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    changed = JOBS.replace('offset = "+5min"\ncommand = ["/usr/bin/true"]',
                           'offset = "+5min"\ncommand = ["/usr/bin/false"]')
    write_config(changed)
    result = sync.sync(config.load(path), now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    assert sorted(result.rewritten) == [f"market-orders@{d}.service" for d in
                                        ("2025-11-26-143500", "2025-11-28-143500",
                                         "2025-12-01-143500")]
    assert sc.reloads == 1 and result.lines().count("daemon-reload") == 1


def test_jobs_left_without_a_user_make_the_sync_exit_1_after_installing_everything(
        write_config, tmp_path, monkeypatch, capsys):
    """Debian's system uids used up (past about 900 jobs of their own users): every timer is
    installed and plan.json written, but the operator's sync exits 1, not 0 (jobusers said why)."""
    from market_timers import cli
    from market_timers.schedule import jobusers

    path = write_config(JOBS)
    sc = Systemctl()
    monkeypatch.setattr(sync, "Systemctl", lambda: sc)
    monkeypatch.setattr(jobusers, "sync_users",
                        lambda cfg, dry_run=False: [("orders", "market-job-orders")])
    assert cli.main(["--config", str(path), "--now", "2025-11-26T12:00:00Z", "sync"]) == 1
    cfg = config.load(path)
    assert len(timers(cfg)) == 6 and len(sc.active) == 6
    assert (cfg.state_dir / "plan.json").exists()
