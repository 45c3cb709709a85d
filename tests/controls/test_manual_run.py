"""`market-timers run JOB --session DATE [--force]`: a deliberate run, refused if it already ran."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from market_timers import cli, ledger
from market_timers.config import loader as config
from market_timers.contracts import exitcodes
from market_timers.controls import manual_run
from market_timers.ledger import runrecord
from market_timers.ledger.local import LocalLedger

CONFIG = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/bin/sh", "-c", "echo sent >> {out}"]
"""
SESSION = date(2025, 11, 26)
NOW = datetime(2025, 11, 26, 21, 30, tzinfo=UTC)


class StartRecorder:
    def __init__(self):
        self.started: list[str] = []

    def start(self, units):
        self.started += units


@pytest.fixture
def cfg(write_config, tmp_path):
    return config.load(write_config(CONFIG.format(out=tmp_path / "orders-sent")))


def run_cmd(cfg, tmp_path, force=False, session=SESSION, job="closing-orders"):
    sc = StartRecorder()
    code = manual_run.command(cfg, job, session, force, now=NOW, systemctl=sc,
                              unit_dir=tmp_path / "run-units")
    return code, sc


def start_as_systemd_would(tmp_path: Path, unit: str, invocation: str = "",
                           step: str = "ExecStart=", extra: dict | None = None,
                           ) -> subprocess.CompletedProcess:
    """Run the unit's ExecStart= (or `step`) with its Environment= lines (and `extra`, what
    systemd adds, e.g. ExecStopPost='s SERVICE_RESULT), as the service would."""
    text = (tmp_path / "run-units" / unit).read_text()
    env = {"PATH": os.environ["PATH"], **({"INVOCATION_ID": invocation} if invocation else {})}
    if os.environ.get("PYTHONPATH"):  # the tree under test, not the venv's editable install
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    argv = None
    for line in text.splitlines():
        if line.startswith("Environment="):
            name, _, value = shlex.split(line[len("Environment="):])[0].partition("=")
            env[name] = value
        elif line.startswith(step):
            argv = shlex.split(line[len(step):])
    for line in text.splitlines():  # LoadCredential=ID:PATH, as systemd hands it over
        if line.startswith("LoadCredential="):
            name, _, source = line[len("LoadCredential="):].partition(":")
            creds = tmp_path / "credentials"
            creds.mkdir(exist_ok=True)
            (creds / name).write_bytes(Path(source).read_bytes())
            env["CREDENTIALS_DIRECTORY"] = str(creds)
    env["MARKET_LOCK_DIR"] = str(tmp_path / "run")
    env.pop("MARKET_JOB_USER", None)  # no market-jobs user here: the job runs as the test's user
    env.update(extra or {})
    assert argv[1] in ("--", "--record")
    return subprocess.run([sys.executable, "-m", "market_timers.run", *argv[1:]], env=env,
                          capture_output=True, text=True, timeout=30)


def claim(cfg) -> None:
    LocalLedger(str(cfg.state_dir)).claim(ledger.Key("closing-orders", "2025-11-26"), "timer",
                                          {"host": "ny4-a", "pid": 4242,
                                           "started_utc": "2025-11-26T20:50:00.031Z"})


def test_run_starts_a_one_off_unit_that_runs_a_missed_session_once(cfg, tmp_path, capsys):
    code, sc = run_cmd(cfg, tmp_path)
    assert code == 0
    [unit] = sc.started
    assert unit == "market-closing-orders@2025-11-26-run213000.service"
    assert "started market-closing-orders@2025-11-26-run213000.service" in capsys.readouterr().out
    text = (tmp_path / "run-units" / unit).read_text()
    assert "OnFailure=market-alert-failure@%n.service" in text  # alerts as for a timer's run
    # ... through its own handlers only: its record step leaves no end record (told twice)
    assert "OnSuccess=market-alert-success@%n.service" in text and "--record %n" not in text
    # the nonce is in no unit (anyone can `systemctl show` one): root's 0600 file holds it
    source = cfg.state_dir / "sync" / "tickets" / unit
    nonce = source.read_text().strip()
    assert nonce not in text and f"LoadCredential=market-timers.ticket:{source}" in text
    assert oct(source.stat().st_mode & 0o777) == "0o600"
    assert oct(source.parent.stat().st_mode & 0o777) == "0o700"
    # an hour past the planned 20:50 and its grace: the operator's start still runs
    proc = start_as_systemd_would(tmp_path, unit)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "orders-sent").read_text() == "sent\n"
    rec = runrecord.read(cfg.state_dir, "closing-orders", "2025-11-26")
    assert (rec["how"], rec["attempt"]) == ("operator", 1)
    # the unit cannot be started a second time to run it again: its ticket is used up
    assert start_as_systemd_would(tmp_path, unit).returncode == exitcodes.RUNNER_ERROR
    assert (tmp_path / "orders-sent").read_text() == "sent\n"


def test_run_of_a_session_that_already_ran_is_refused_without_force(cfg, tmp_path, capsys):
    claim(cfg)
    code, sc = run_cmd(cfg, tmp_path)
    assert code == exitcodes.USAGE and sc.started == []
    err = capsys.readouterr().err
    assert ("market-timers run: closing-orders already ran for session 2025-11-26: started at "
            "2025-11-26T20:50:00.031Z on host ny4-a (pid 4242, attempt 1, timer). Add --force "
            "to run it again") in err
    assert not (tmp_path / "run-units").exists()


def test_run_force_records_a_forced_second_attempt(cfg, tmp_path):
    claim(cfg)
    code, sc = run_cmd(cfg, tmp_path, force=True)
    assert code == 0
    proc = start_as_systemd_would(tmp_path, sc.started[0])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "orders-sent").read_text() == "sent\n"
    attempts = LocalLedger(str(cfg.state_dir)).attempts(ledger.Key("closing-orders",
                                                                  "2025-11-26"))
    assert [(a["attempt"], a["how"]) for a in attempts] == [(1, "timer"), (2, "forced")]
    assert attempts[1]["by"]


def test_a_timer_fired_start_never_carries_the_force(cfg, tmp_path):
    """The planned units have no ticket; the run unit's is used by its own start only."""
    from market_timers.schedule import plan, render

    claim(cfg)
    run_cmd(cfg, tmp_path, force=True)
    for unit in render.render_all(cfg, plan.plan_between(cfg, SESSION, SESSION)):
        assert "MARKET_TICKET" not in unit.text


def test_run_refuses_unknown_jobs_and_days_without_a_session(cfg, tmp_path, capsys):
    assert run_cmd(cfg, tmp_path, job="nope")[0] == exitcodes.USAGE
    assert "no job named 'nope'" in capsys.readouterr().err
    assert run_cmd(cfg, tmp_path, session=date(2025, 11, 27))[0] == exitcodes.USAGE  # Thanksgiving
    assert "closing-orders has no run on 2025-11-27" in capsys.readouterr().err


def test_the_cli_refuses_a_session_that_already_ran(cfg, write_config, tmp_path, capsys):
    claim(cfg)
    path = tmp_path / "market-timers.toml"
    code = cli.main(["--config", str(path), "run", "closing-orders", "--session", "2025-11-26"])
    assert code == exitcodes.USAGE
    assert "already ran for session 2025-11-26" in capsys.readouterr().err


def test_a_run_by_hand_of_a_job_with_retries_retries(write_config, tmp_path):
    """systemd's Restart= restarts the one-off unit, which presents the used ticket: the retry
    marker its failed first attempt left decides, as for a timer's run (it used to be 172)."""
    flag, out = tmp_path / "failed-once", tmp_path / "report-sent"
    cfg = config.load(write_config(CONFIG.replace("closing-orders", "report").format(
        out=out).replace(f'"echo sent >> {out}"',
                         f'"test -e {flag} || {{ touch {flag}; exit 3; }}; echo sent >> {out}"')
        + "retries = 2\nretry_delay = \"1s\"\n"))
    sc = StartRecorder()
    assert manual_run.command(cfg, "report", SESSION, False, now=NOW, systemctl=sc,
                              unit_dir=tmp_path / "run-units") == 0
    [unit] = sc.started
    first = start_as_systemd_would(tmp_path, unit)
    assert first.returncode == 3
    record_as_systemd_would(tmp_path, unit, "exit-code", "exited", "3")
    again = start_as_systemd_would(tmp_path, unit)  # Restart=on-failure
    assert again.returncode == 0, again.stderr
    assert out.read_text() == "sent\n"
    attempts = LocalLedger(str(cfg.state_dir)).attempts(ledger.Key("report", "2025-11-26"))
    assert [(a["attempt"], a["how"]) for a in attempts] == [(1, "operator"), (2, "retry")]


def record_as_systemd_would(tmp_path: Path, unit: str, result: str, code: str, status: str):
    text = (tmp_path / "run-units" / unit).read_text()
    env = {"PATH": os.environ["PATH"], "SERVICE_RESULT": result, "EXIT_CODE": code,
           "EXIT_STATUS": status}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    for line in text.splitlines():
        if line.startswith("Environment="):
            name, _, value = shlex.split(line[len("Environment="):])[0].partition("=")
            env[name] = value
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record"], env=env, check=True,
                   capture_output=True, timeout=30)


class SystemdStarts:
    """systemctl as far as `run` uses it: start runs the unit's runner at once (an invocation of
    its own), show tells that invocation and that it has ended."""

    def __init__(self, tmp_path):
        self.tmp_path, self.units, self.ended = tmp_path, {}, {}

    def start(self, units):
        for unit in units:
            self.units[unit] = f"{len(self.units) + 1:032x}"
            self.ended[unit] = start_as_systemd_would(self.tmp_path, unit, self.units[unit])

    def show(self, units, props):
        return {u: {"InvocationID": self.units.get(u, ""), "ActiveState": "inactive",
                    "Result": "exit-code", "ExecMainStatus": str(self.ended[u].returncode)}
                for u in units}


def test_run_of_a_halted_job_says_refused_and_exits_non_zero(cfg, tmp_path, capsys, monkeypatch):
    """Seen: `market-timers run ORDERJOB --force` while halted exited 0 and printed "started";
    only the unit's exit status showed the refusal."""
    from tests.controls.test_halt import FakeSystemctl

    from market_timers.host import systemctl

    monkeypatch.setattr(systemctl, "Systemctl", FakeSystemctl)
    path = tmp_path / "market-timers.toml"
    assert cli.main(["--config", str(path), "halt", "--job", "closing-orders", "--reason",
                     "runaway algo"]) == 0
    capsys.readouterr()
    sc = SystemdStarts(tmp_path)
    code = manual_run.command(cfg, "closing-orders", SESSION, True, now=NOW, systemctl=sc,
                              unit_dir=tmp_path / "run-units", wait=10)
    out, err = capsys.readouterr()
    assert code == exitcodes.FAILURE
    assert "started" not in out
    assert "refused: halted: closing-orders is halted (market-timers halt)" in err
    assert "runaway algo" in err
    assert not (tmp_path / "orders-sent").exists()


def test_run_that_the_runner_started_says_started(cfg, tmp_path, capsys):
    sc = SystemdStarts(tmp_path)
    code = manual_run.command(cfg, "closing-orders", SESSION, False, now=NOW, systemctl=sc,
                              unit_dir=tmp_path / "run-units", wait=10)
    assert code == 0
    assert "started market-closing-orders@2025-11-26-run213000.service" in \
        capsys.readouterr().out
