"""The operator's frictions of issue 27, each as it is met at the command line."""

from __future__ import annotations

from market_timers import cli
from market_timers.contracts import exitcodes

CONFIG = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
"""


def test_cluster_status_without_the_dsn_credential_says_so_in_one_line(write_config, tmp_path,
                                                                        capsys):
    path = write_config(CONFIG)
    missing = tmp_path / "no-dsn"
    assert cli.main(["--config", str(path), "cluster", "status", "--dsn-file",
                     str(missing)]) == exitcodes.FAILURE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read the cluster DSN credential" in err[0]
    assert str(missing) in err[0] and err[0].startswith("market-timers cluster status: ")


def test_fence_check_without_the_dsn_credential_says_do_not_act(write_config, tmp_path, capsys,
                                                                monkeypatch):
    monkeypatch.setenv("MARKET_FENCE", "7")
    monkeypatch.setenv("MARKET_LOCK_GROUP", "orders")
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "fence", "check", "--dsn-file",
                     str(tmp_path / "no-dsn")]) == exitcodes.FAILURE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read the cluster DSN credential" in err[0]
    assert "do not act" in err[0]


DISABLED = CONFIG + """
[[job]]
name = "report"
event = "close"
offset = "+30min"
command = ["/usr/bin/true"]
enabled = false
"""


def test_try_on_a_disabled_job_says_it_is_disabled(write_config, capsys):
    path = write_config(DISABLED)
    assert cli.main(["--config", str(path), "try", "report"]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "job 'report' is disabled" in err and "enabled = false" in err
    assert "no job named" not in err


def test_run_on_a_disabled_job_says_it_is_disabled(write_config, capsys):
    path = write_config(DISABLED)
    assert cli.main(["--config", str(path), "run", "report", "--session",
                     "2025-11-26"]) == exitcodes.USAGE
    assert "job 'report' is disabled" in capsys.readouterr().err


def test_outbox_list_without_a_channel_says_none_is_configured(write_config, capsys):
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "outbox", "list"]) == 0
    out = capsys.readouterr().out
    assert "every alert was delivered" not in out
    assert "no alert channel is configured" in out and "[alerts." in out


def test_outbox_list_with_a_channel_and_nothing_pending_says_all_delivered(write_config, capsys):
    path = write_config(CONFIG + '\n[alerts.webhook]\nurl = "http://127.0.0.1:9/hook"\n')
    assert cli.main(["--config", str(path), "outbox", "list"]) == 0
    assert "outbox empty: every alert was delivered" in capsys.readouterr().out
