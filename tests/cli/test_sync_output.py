"""`market-timers sync` ends with one summary line; the list of each unit only with -v (issue 42,
item 2: it printed 234 lines for the example config and no summary)."""

from __future__ import annotations

import pytest
from tests.watch.conftest import FakeSystemctl

from market_timers import cli
from market_timers.host import systemctl

CONFIG = """
calendar = "XNYS"
horizon = 3
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
[[job]]
name = "statement"
event = "close"
offset = "+30min"
command = ["/bin/true"]
"""
NOW = "2025-11-24T12:00:00Z"  # Monday: the sessions of Mon, Tue, Wed


@pytest.fixture
def fake(tmp_path, monkeypatch):
    from market_timers.schedule import sync as sync_mod

    recorder = FakeSystemctl(tmp_path / "units")
    for module in (systemctl, sync_mod):
        monkeypatch.setattr(module, "Systemctl", lambda *a, **k: recorder)
    return recorder


def sync(write_config, capsys, *extra) -> list[str]:
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "sync", *extra]) == 0
    return capsys.readouterr().out.splitlines()


def test_sync_says_what_it_did_in_one_line(write_config, capsys, fake):
    lines = sync(write_config, capsys)
    assert len(lines) == 1
    assert lines[0] == ("synced 6 fires of 3 sessions: wrote 12 units (0 rewritten), started 6 "
                        "timers, stopped 0, deleted 0 (each unit: sync -v)")
    assert sync(write_config, capsys) == [
        "nothing to do: the 6 fires of 3 sessions are installed"]


def test_sync_verbose_lists_each_unit_then_the_summary(write_config, capsys, fake):
    lines = sync(write_config, capsys, "-v")
    assert "start market-signal@2025-11-24-204500.timer" in lines
    assert len([x for x in lines if x.startswith("write ")]) == 12
    assert lines[-1].startswith("synced 6 fires of 3 sessions")


def test_sync_dry_run_says_what_it_would_do(write_config, capsys, fake):
    lines = sync(write_config, capsys, "--dry-run")
    assert lines == ["would sync 6 fires of 3 sessions: write 12 units (0 rewritten), start 6 "
                     "timers, stop 0, delete 0 (each unit: sync --dry-run -v)"]
