"""The command line as a new user meets it (issue 9): global options anywhere, help for every
option, a quiet end when the reader of a pipe goes away, hints where a user is stuck."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from market_timers import cli

ROOT = Path(__file__).resolve().parents[2]
JOB = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""
NOW = "2025-11-26T12:00:00Z"


def subparsers() -> dict[str, argparse.ArgumentParser]:
    for action in cli.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_global_options_are_accepted_after_the_command(write_config, capsys):
    path = write_config(JOB)
    assert cli.main(["plan", "--config", str(path), "--now", NOW]) == 0
    after = capsys.readouterr().out
    assert cli.main(["--config", str(path), "--now", NOW, "plan"]) == 0
    assert capsys.readouterr().out == after and "signal" in after


def test_option_after_the_command_wins_and_one_before_is_kept(write_config, tmp_path, capsys):
    path = write_config(JOB)
    assert cli.main(["--config", str(path), "plan", "--now", NOW]) == 0
    assert cli.main(["--config", str(tmp_path / "nope.toml"), "plan", "--config", str(path),
                     "--now", NOW]) == 0


@pytest.mark.parametrize("name", sorted(subparsers()))
def test_every_subcommand_help_shows_the_global_options(name):
    from market_timers.cli.parser import NO_CLOCK

    text = subparsers()[name].format_help()
    assert "--config" in text and "MARKET_TIMERS_CONFIG" in text
    assert ("--now" in text) == (name not in NO_CLOCK)  # only where the clock is read


@pytest.mark.parametrize("name", ["(global)", *sorted(subparsers())])
def test_every_option_has_a_help_text(name):
    parser = cli.build_parser() if name == "(global)" else subparsers()[name]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help, f"{name}: {action.option_strings or action.dest} has no help"


def test_missing_config_names_config_option_and_variable(tmp_path, capsys):
    assert cli.main(["--config", str(tmp_path / "nope.toml"), "plan"]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "--config" in err and "$MARKET_TIMERS_CONFIG" in err


def test_unquoted_cron_line_gets_a_hint_to_quote_it(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["check-cron", "45", "15", "*", "*", "1-5", "--calendar", "XNYS"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and "quote the cron line" in err


def test_other_commands_get_no_cron_hint(capsys):
    with pytest.raises(SystemExit):
        cli.main(["plan", "extra"])
    assert "cron" not in capsys.readouterr().err


def test_plan_into_a_closed_pipe_ends_quietly(write_config):
    path = write_config(JOB)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "generator")}
    # Years of sessions: far more than a pipe's buffer, so the writer meets the closed pipe.
    for fmt in ("", " --json"):
        proc = subprocess.run(
            f"{sys.executable} -m market_timers --config {path} plan --from 2019-01-01 "
            f"--to 2025-12-31{fmt} | head -1; exit ${{PIPESTATUS[0]}}",
            shell=True, executable="/bin/bash", capture_output=True, text=True, env=env,
            check=False)
        assert proc.stdout.count("\n") == 1
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
        assert proc.returncode == 0


def test_render_reports_what_changed(write_config, tmp_path, capsys):
    path = write_config(JOB)
    out = tmp_path / "out"
    args = ["--config", str(path), "--now", NOW, "render", "--out", str(out)]
    assert cli.main(args) == 0
    first = capsys.readouterr().out
    assert "4 new, 0 changed, 0 unchanged" in first
    assert cli.main(args) == 0
    again = capsys.readouterr().out
    assert again.startswith("nothing changed") and "wrote" not in again
    (out / "market-other@2025-01-02-000000.timer").write_text("x")
    path.write_text(path.read_text().replace('"/usr/bin/true"', '"/usr/bin/false"'))
    assert cli.main(args) == 0
    third = capsys.readouterr().out
    assert "0 new, 2 changed, 2 unchanged" in third
    assert "changed market-signal@2025-11-26-204500.service" in third
    assert "1 other market-* unit(s) there are not in this plan" in third


def test_render_into_a_read_only_directory_is_an_error_message(write_config, tmp_path, capsys,
                                                              monkeypatch):
    import errno

    from market_timers.schedule import render

    def read_only(path, text, mode=0o644, **_):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(render, "write_atomic", read_only)
    path = write_config(JOB)
    out = tmp_path / "ro"
    assert cli.main(["--config", str(path), "--now", NOW, "render", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"cannot write into {out}: Read-only file system" in err and "Traceback" not in err
