"""`--now` (issue 27): honoured by every command that offers it, refused by those it cannot
apply to; `run` for a session whose instant has not come refuses without --yes."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from market_timers import cli
from market_timers.alerts import commands as alert_commands
from market_timers.contracts import exitcodes
from market_timers.controls import manual_run

CONFIG = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
"""
NOW = "2025-11-26T22:00:00Z"
NOW_DT = datetime(2025, 11, 26, 22, 0, tzinfo=UTC)


class StartRecorder:
    def __init__(self):
        self.started: list[str] = []

    def start(self, units):
        self.started += units


def test_digest_without_a_session_takes_the_day_of_now(write_config, capsys, monkeypatch):
    monkeypatch.delenv("MARKET_SESSION", raising=False)
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "digest"]) == 0
    assert "2025-11-26" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "function"), [
    (["alert", "--test", "ntfy"], "alert_test"),
    (["ack", "1126-0123abcd"], "ack"),
    (["outbox", "flush"], "outbox_flush"),
    (["alert-handler", "failure", "x.service"], "alert_handler"),
])
def test_alert_commands_run_on_the_clock_of_now(write_config, monkeypatch, argv, function):
    seen = []
    monkeypatch.setattr(alert_commands, function,
                        lambda *a, now=None, **k: seen.append(now() if now else None) or 0)
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), *argv, "--now", NOW]) == 0
    assert seen == [NOW_DT]


def test_check_cron_ends_its_default_window_at_now(capsys):
    assert cli.main(["check-cron", "50 15 * * 1-5", "--tz", "America/New_York", "--calendar",
                     "XNYS", "--now", NOW, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"2025-11-26"' in out or "2025-11-26" in out
    assert "2025-11-28" not in out and "2025-12-01" not in out


def test_run_uses_now_for_its_unit_name(write_config, monkeypatch):
    seen = []
    monkeypatch.setattr(manual_run, "command",
                        lambda *a, now=None, **k: seen.append(now) or 0)
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "run", "closing-orders", "--session",
                     "2025-11-26"]) == 0
    assert seen == [NOW_DT]


@pytest.mark.parametrize("argv", [["cluster", "status"], ["fence", "check"],
                                  ["verify", "/tmp"]])
def test_commands_without_a_clock_do_not_offer_now(write_config, capsys, argv):
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, *argv]) == exitcodes.USAGE
    assert f"--now does not apply to {argv[0]}" in capsys.readouterr().err
    from tests.cli.test_cli_usage import subparsers

    assert "--now" not in subparsers()[argv[0]].format_help()


def test_run_of_a_session_still_to_come_refuses_without_yes(write_config, tmp_path, capsys):
    from market_timers.config import loader as config

    cfg = config.load(write_config(CONFIG))
    sc = StartRecorder()
    code = manual_run.command(cfg, "closing-orders", date(2025, 11, 28), False, now=NOW_DT,
                              systemctl=sc, unit_dir=tmp_path / "units")
    assert code == exitcodes.USAGE and sc.started == []
    err = capsys.readouterr().err
    assert "planned for Fri 2025-11-28 17:50:00 UTC" in err and "--yes" in err
    code = manual_run.command(cfg, "closing-orders", date(2025, 11, 28), False, now=NOW_DT,
                              systemctl=sc, unit_dir=tmp_path / "units", yes=True)
    assert code == 0 and len(sc.started) == 1
