"""The static handler/outbox units, and the alert commands reached through the real CLI and config
loader (the path the units take: `market-timers alert-handler failure %i`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from market_timers.channels.credentials import OVERRIDE
from market_timers.cli import main

UNITS = Path(__file__).resolve().parents[2] / "units"


def unit_entries(name: str) -> list[tuple[str, str, str]]:
    """(section, key, value) in order, repeated keys kept (configparser would drop them)."""
    section, out = "", []
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key, value))
    return out


def values(name: str, section: str, key: str) -> list[str]:
    return [v for s, k, v in unit_entries(name) if (s, k) == (section, key)]


@pytest.mark.parametrize("mode", ["failure", "success"])
def test_handler_template_passes_the_unit_name_unescaped(mode):
    name = f"market-alert-{mode}@.service"
    assert values(name, "Service", "ExecStart") == [
        f"/usr/bin/market-timers alert-handler {mode} %i"]
    assert values(name, "Service", "Type") == ["oneshot"]
    assert values(name, "Service", "User") == ["market-timers"]
    assert values(name, "Service", "SupplementaryGroups") == ["systemd-journal"]


@pytest.mark.parametrize("name", ["market-alert-failure@.service", "market-alert-success@.service",
                                  "market-outbox.service", "market-deadman.service"])
def test_channel_credentials_come_from_the_drop_in_not_from_fixed_names(name):
    """A fixed list of names left a renamed credential missing at run time: the channels'
    LoadCredential= lines are rendered by sync (alerts/credunits.py, tests in
    test_alerts_credunits.py); the deadman keeps its heartbeat's default name."""
    creds = values(name, "Service", "LoadCredential")
    assert creds == (["market-timers.deadman-ping-url"] if "deadman" in name else [])
    text = (UNITS / name).read_text()
    assert "Environment=" not in text and "EnvironmentFile" not in text  # no secret in the env


def test_outbox_timer_runs_flush_every_minute():
    assert values("market-outbox.timer", "Timer", "OnUnitActiveSec") == ["1min"]
    assert values("market-outbox.timer", "Install", "WantedBy") == ["timers.target"]
    assert values("market-outbox.service", "Service", "ExecStart") == [
        "/usr/bin/market-timers outbox flush"]


@pytest.fixture
def config_file(tmp_path, api):
    path = tmp_path / "market-timers.toml"
    path.write_text(f"""
calendar = "XNYS"
state_dir = "{tmp_path}/state"
spool_dir = "{tmp_path}/spool"

[alerts.telegram]
chat_id = "-42"
api_base = "{api.base}"
""")
    return path


def test_cli_failure_handler_delivers_and_outbox_list_is_empty(config_file, api, creds,
                                                              monkeypatch, capsys):
    monkeypatch.setenv(OVERRIDE, str(creds))
    for k, v in {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited",
                 "MONITOR_EXIT_STATUS": "3"}.items():
        monkeypatch.setenv(k, v)
    unit = "market-pre-open@2026-11-30-142500.service"
    assert main(["--config", str(config_file), "alert-handler", "failure", unit]) == 0
    [msg] = api.received("telegram")
    assert msg["chat_id"] == "-42" and "pre-open failed with exit status 3" in msg["text"]
    capsys.readouterr()
    assert main(["--config", str(config_file), "outbox", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_cli_rate_limited_alert_stays_listed_and_flush_respects_retry_after(
        config_file, api, creds, monkeypatch, capsys):
    monkeypatch.setenv(OVERRIDE, str(creds))
    monkeypatch.setenv("MONITOR_SERVICE_RESULT", "watchdog")
    api.fail_next("telegram", 429, retry_after=3600)
    unit = "market-pre-open@2026-11-30-142500.service"
    assert main(["--config", str(config_file), "alert-handler", "failure", unit]) == 0
    assert main(["--config", str(config_file), "outbox", "flush"]) == 0  # before Retry-After
    assert api.received() == []
    capsys.readouterr()
    assert main(["--config", str(config_file), "outbox", "list", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["kind"] == "watchdog" and "429" in row["last_error"] and row["attempts"] == 1
    assert main(["--config", str(config_file), "outbox", "list"]) == 0
    assert "pre-open hung: killed by the watchdog" in capsys.readouterr().out


def test_handler_start_up_does_not_import_pandas_or_exchange_calendars():
    import sys

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.path.insert(0, {!r}); import market_timers.cli, "
            "market_timers.alerts.commands, market_timers.alerts.handler; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pandas', 'exchange_calendars', 'numpy')))".format(str(root / "generator")))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


