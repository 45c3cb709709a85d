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


# Progress on a terminal (issue 42 item 2): a sync of a thousand jobs starts 10,000 timers ------

class Terminal:
    """stderr as a terminal (or not): what was written to it."""

    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def chunked_systemctl(progress):
    import subprocess

    sc = systemctl.Systemctl()
    sc._proc = lambda *args: subprocess.CompletedProcess(args, 0, "", "")
    sc.on_chunk = progress
    return sc


def test_a_long_start_tells_its_progress_on_a_terminal_in_place():
    from market_timers.cli.progress import for_terminal

    term = Terminal(tty=True)
    chunked_systemctl(for_terminal(term)).start([f"market-j{i}@x.timer" for i in range(1200)])
    assert term.text == ("\rstarted 500/1,200 timers\rstarted 1,000/1,200 timers"
                         "\rstarted 1,200/1,200 timers\n")


def test_no_progress_off_a_terminal_nor_for_one_chunk():
    from market_timers.cli.progress import for_terminal

    assert for_terminal(Terminal(tty=False)) is None  # a pipe, a log, the refresh's journal
    term = Terminal(tty=True)
    chunked_systemctl(for_terminal(term)).start([f"market-j{i}@x.timer" for i in range(500)])
    assert term.text == ""


def test_sync_hands_its_progress_to_systemctl(write_config, capsys, fake, monkeypatch):
    import sys

    term = Terminal(tty=True)
    monkeypatch.setattr(sys, "stderr", term)
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "sync"]) == 0
    assert callable(fake.on_chunk)
