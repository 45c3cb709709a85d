"""The traps a new operator fell into (issue 42, item 3): each command says what it will really do,
or refuses, instead of printing a success that never happens."""

from __future__ import annotations

import json

import pytest

from market_timers import cli
from market_timers.config import loader as config
from market_timers.controls import trial
from market_timers.host import systemctl

NOW = "2025-11-26T12:00:00Z"  # a Wednesday; the close is 21:00 UTC
CONFIG = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
lock = "orders"
[[job]]
name = "warm-job"
event = "close"
offset = "-5min"
warm = "30s"
command = ["/usr/bin/true"]
"""


class Recorder:
    started: list[list[str]] = []

    def start(self, units):
        Recorder.started.append(list(units))


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    directory = tmp_path / "run-systemd"
    monkeypatch.setattr(trial, "RUNTIME_UNIT_DIR", directory)
    monkeypatch.setattr(systemctl, "Systemctl", Recorder)
    Recorder.started = []
    return directory


def test_try_in_less_than_the_lead_and_a_margin_is_refused_naming_the_minimum(
        write_config, runtime, capsys):
    """`--in 2` with a 2 s lead wrote a timer for now: systemd took it as elapsed, nothing ran."""
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "try", "signal", "--in", "2"]) == 2
    err = capsys.readouterr().err
    assert "--in 2" in err and "at least 5" in err and "lead" in err
    assert Recorder.started == [] and not runtime.exists()


def test_try_default_delay_leaves_a_warm_job_its_warm_up(write_config, runtime, capsys):
    """A job started 30 s early (warm): the default delay is its lead plus the margin."""
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "try", "warm-job"]) == 0
    assert Recorder.started == [["market-warm-job@try-20251126T120033Z.timer"]]
    assert "2025-11-26 12:00:33 UTC" in capsys.readouterr().out
    assert cli.main(["--config", str(path), "--now", NOW, "try", "warm-job", "--in", "10"]) == 2
    assert "at least 33" in capsys.readouterr().err


HALT_CONFIG = """
calendar = "XNYS"
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
lock = "orders"
[[job]]
name = "statement"
event = "close"
offset = "30min"
command = ["/usr/bin/true"]
"""


def test_halt_of_the_order_jobs_where_no_job_is_one_is_refused_naming_what_would_cover(
        write_config, capsys, monkeypatch):
    monkeypatch.setattr(systemctl, "Systemctl", lambda: pytest.fail("no halt: nothing to stop"))
    path = write_config(HALT_CONFIG)
    assert cli.main(["--config", str(path), "halt", "--reason", "broker down"]) == 2
    err = capsys.readouterr().err
    assert "covers no job" in err and "orders = true" in err
    assert "--all" in err and "--group orders" in err and "--job signal" in err
    assert not (path.parent / "state" / "controls").exists() or not any(
        (path.parent / "state" / "controls").iterdir())


def example_jobs():
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / "examples" / "market-timers.example.toml"
    return {j.name: j for j in config.load(path).jobs}


def test_the_shipped_example_halts_its_order_jobs_and_chains_closing_orders_to_signal():
    jobs = example_jobs()
    assert sorted(n for n, j in jobs.items() if j.orders) == ["closing-orders", "opening-orders"]
    assert list(jobs["closing-orders"].requires) == ["signal"]


def test_check_cron_defaults_to_the_configs_calendar_and_its_exchange_zone(write_config, capsys):
    path = write_config('calendar = "XNYS"\n[[job]]\nname = "signal"\nevent = "close"\n'
                        'command = ["/bin/true"]\n')
    assert cli.main(["--config", str(path), "check-cron", "45 15 * * 1-5", "--offset", "-15min",
                     "--from", "2025-09-02", "--to", "2025-12-31", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["calendar"], out["tz"]) == ("XNYS", "America/New_York")
    assert (out["fires"], out["on_time"]) == (87, 83)


def test_check_cron_says_the_window_and_zone_it_used(write_config, capsys):
    path = write_config('calendar = "XNYS"\n[[job]]\nname = "signal"\nevent = "close"\n'
                        'command = ["/bin/true"]\n')
    assert cli.main(["--config", str(path), "--now", "2025-12-31T12:00:00Z", "check-cron",
                     "45 15 * * 1-5", "--offset", "-15min"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "in America/New_York" in first and "2025-10-02" in first and "2025-12-31" in first
    assert "the last 90 days" in out and "--tz" in out


def test_check_cron_help_tells_the_real_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check-cron", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "90 days" in out and "a year" not in out
    assert "the config's calendar" in out and "exchange's zone" in out


@pytest.mark.parametrize(("table", "typo", "hint"), [
    ("[[job]]\nname = \"a\"\nevent = \"close\"\ncommand = [\"/bin/true\"]\n", "ofset = \"-1min\"",
     "job.a.ofset: unknown key (known: "),
    ("", "[alert.telegram]\nchat_id = \"1\"", "alert: unknown key"),
])
def test_unknown_keys_and_tables_get_a_did_you_mean(write_config, capsys, table, typo, hint):
    path = write_config(f'calendar = "XNYS"\n{table}{typo}\n' if table
                        else f'calendar = "XNYS"\n[[job]]\nname = "a"\nevent = "close"\n'
                             f'command = ["/bin/true"]\n{typo}\n')
    assert cli.main(["--config", str(path), "plan"]) == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if hint in x)
    assert ("did you mean offset?" in line) if "ofset" in typo else (
        "did you mean alerts" in line)


@pytest.mark.parametrize(("key", "spaced", "tight"), [
    ("offset", "- 15 min", "-15min"), ("grace", "2 min", "2min"), ("lead", "0 s", "0s"),
    ("lead", "3 s", "3s"), ("timeout", "1 h 30 min", "1h30min"),
])
def test_durations_with_spaces_read_as_without_everywhere(write_config, key, spaced, tight):
    def job(value):
        text = (f'calendar = "XNYS"\n[[job]]\nname = "a"\nevent = "close"\n'
                f'command = ["/bin/true"]\n{key} = "{value}"\n')
        return getattr(config.load(write_config(text)).jobs[0], key)

    assert job(spaced) == job(tight)


def test_a_periodic_jobs_edges_and_period_read_spaces_too(write_config):
    def slots(every, start):
        text = (f'calendar = "XNYS"\n[[job]]\nname = "c"\nevery = "{every}"\nfrom = "{start}"\n'
                'until = "close-20min"\ncommand = ["/bin/true"]\n')
        p = config.load(write_config(text)).jobs[0].periodic
        return p.every, p.start_offset

    assert slots("1 min", "open + 5 min") == slots("1min", "open+5min")
