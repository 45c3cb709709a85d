"""The package's units run `market-timers deadman` and `market-timers refresh`; an operator runs
`market-timers status`: each command reaches its module in watch/ (no module path is in a unit)."""

from __future__ import annotations

from market_timers.cli import main

from .conftest import THANKSGIVING_CONFIG

NOW = ["--now", "2025-12-01T12:00:00Z"]


def test_deadman_command_runs_the_pass(make_config, caplog):
    path = make_config.write(THANKSGIVING_CONFIG)
    assert main(["--config", str(path), *NOW, "deadman"]) == 1  # no plan.json: it says so
    assert "sync has never run" in caplog.text


def test_status_command_reports_no_plan(make_config, capsys):
    path = make_config.write(THANKSGIVING_CONFIG)
    assert main(["--config", str(path), *NOW, "status"]) == 1
    assert "sync has not run yet" in capsys.readouterr().out


def test_refresh_command_with_a_broken_config_exits_2_and_spools_its_alert(make_config,
                                                                          tmp_path):
    path = make_config.write(THANKSGIVING_CONFIG.replace('"-15min"', '"-15 minutes"') +
                             "\n[alerts]\n[alerts.webhook]\n")
    assert main(["--config", str(path), *NOW, "refresh"]) == 2
    assert any("job.signal.offset" in p.read_text() for p in (tmp_path / "spool").rglob("*.json"))


def test_deadman_command_then_updates_the_metrics(make_config, tmp_path):
    """The command layer composes the pass and the metrics (the pass itself writes none)."""
    textfile = tmp_path / "node-exporter" / "market_timers.prom"
    textfile.parent.mkdir()
    path = make_config.write(THANKSGIVING_CONFIG + f'\n[metrics]\ntextfile = "{textfile}"\n')
    assert main(["--config", str(path), *NOW, "deadman"]) == 1  # no plan.json: it says so
    assert "market_timers_" in textfile.read_text()
