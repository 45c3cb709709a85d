"""Pause and resume: `market-timers pause JOB|--group G [--until DATE] --note TEXT`, `resume`;
a paused start is refused (exit 177) and recorded as paused, never missed; `pause_on_failure`
pauses the job's lock group after its failure until `resume`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.runner.test_runner import context, record, run

from market_timers import cli
from market_timers.contracts import exitcodes, outcomes
from market_timers.ledger import pauses, runrecord

SESSION = "2025-11-28"
CONFIG = """
calendar = "XNYS"
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
lock = "orders"

[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
lock = "orders"
orders = true
pause_on_failure = true
"""


@pytest.fixture
def cfg(write_config):
    return write_config(CONFIG)


def main(cfg, *args) -> int:
    return cli.main(["--config", str(cfg), *args])


def test_paused_job_is_refused_with_its_own_code_and_recorded_as_paused(tmp_path, cfg, capsys):
    assert main(cfg, "pause", "signal", "--note", "broker maintenance") == 0
    assert "paused signal" in capsys.readouterr().out
    marker = tmp_path / "ran"
    proc = run(context(tmp_path), "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.PAUSED == 177
    assert not marker.exists()
    assert "paused" in proc.stderr and "broker maintenance" in proc.stderr
    assert "market-timers resume signal" in proc.stderr
    refused = record(tmp_path)
    assert refused["refused"] == "paused" and refused["note"] == "broker maintenance"


def test_resume_lets_the_next_start_run(tmp_path, cfg):
    assert main(cfg, "pause", "signal", "--note", "x") == 0
    assert run(context(tmp_path), "/usr/bin/true").returncode == exitcodes.PAUSED
    assert main(cfg, "resume", "signal") == 0
    env = context(tmp_path, MARKET_SESSION="2025-12-01")
    assert run(env, "/usr/bin/true").returncode == 0


def test_a_group_pause_holds_every_job_of_the_group(tmp_path, cfg):
    assert main(cfg, "pause", "--group", "orders", "--note", "x") == 0
    proc = run(context(tmp_path, MARKET_JOB="closing-orders"), "/usr/bin/true")
    assert proc.returncode == exitcodes.PAUSED
    assert "lock group orders" in proc.stderr


def test_until_a_date_holds_the_sessions_before_it(tmp_path, cfg):
    assert main(cfg, "pause", "signal", "--until", "2025-11-29", "--note", "x") == 0
    assert run(context(tmp_path), "/usr/bin/true").returncode == exitcodes.PAUSED
    env = context(tmp_path, MARKET_SESSION="2025-11-29")
    assert run(env, "/usr/bin/true").returncode == 0


def test_pause_names_an_unknown_job_or_group(cfg, capsys):
    assert main(cfg, "pause", "signl", "--note", "x") == 2
    assert "signl" in capsys.readouterr().err
    assert main(cfg, "pause", "--group", "nope", "--note", "x") == 2
    assert "nope" in capsys.readouterr().err


def test_pause_needs_a_note(cfg, capsys):
    with pytest.raises(SystemExit):
        main(cfg, "pause", "signal")


def test_pause_is_refused_to_a_user_who_is_not_root_nor_an_operator(cfg, capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setattr(os, "getgroups", lambda: [1234])
    assert main(cfg, "pause", "signal", "--note", "x") == 1
    assert "root" in capsys.readouterr().err


def test_a_pause_record_the_package_user_could_write_is_not_root_owned(tmp_path):
    """The controls directory is root's: the runner ignores one that someone else owns."""
    state = tmp_path / "state"
    (state / "controls").mkdir(parents=True)
    (state / "controls" / "pause-job-signal").write_text("note=x\n")
    os.chown(state / "controls", 1234, 1234)
    assert pauses.paused(str(state), "signal", "orders", SESSION) is None


def test_status_lists_the_paused_session_and_the_deadman_does_not_call_it_missed(tmp_path, cfg):
    assert main(cfg, "pause", "signal", "--note", "x") == 0
    run(context(tmp_path), "/usr/bin/true")
    rec = runrecord.read(tmp_path / "state", "signal", SESSION)
    assert rec is not None and rec["refused"] == "paused"  # a record: the deadman sees a start
    assert outcomes.classify("exit-code", "exited", "177") == "paused"


def record_step(tmp_path, job: str, result: str, status: str, **extra):
    env = context(tmp_path, MARKET_JOB=job, SERVICE_RESULT=result, EXIT_CODE="exited",
                  EXIT_STATUS=status, **extra)
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record"], env=env,
                   check=True, timeout=30)


def test_pause_on_failure_pauses_the_group_until_resume(tmp_path, cfg, capsys):
    env = context(tmp_path, MARKET_JOB="closing-orders", MARKET_PAUSE_ON_FAILURE="1",
                  INVOCATION_ID="inv1")
    assert run(env, "/bin/sh", "-c", "exit 3").returncode == 3
    record_step(tmp_path, "closing-orders", "exit-code", "3", MARKET_PAUSE_ON_FAILURE="1",
                INVOCATION_ID="inv1")
    held = pauses.paused(str(tmp_path / "state"), "signal", "orders", "2025-12-01")
    assert held is not None and "closing-orders" in held["note"]
    proc = run(context(tmp_path, MARKET_SESSION="2025-12-01"), "/usr/bin/true")
    assert proc.returncode == exitcodes.PAUSED
    assert "market-timers resume --group orders" in proc.stderr
    assert main(cfg, "resume", "--group", "orders") == 0
    assert run(context(tmp_path, MARKET_SESSION="2025-12-01"), "/usr/bin/true").returncode == 0


def test_a_success_does_not_pause(tmp_path):
    env = context(tmp_path, MARKET_JOB="closing-orders", MARKET_PAUSE_ON_FAILURE="1",
                  INVOCATION_ID="inv1")
    assert run(env, "/usr/bin/true").returncode == 0
    record_step(tmp_path, "closing-orders", "success", "0", MARKET_PAUSE_ON_FAILURE="1",
                INVOCATION_ID="inv1")
    assert pauses.paused(str(tmp_path / "state"), "signal", "orders", "2025-12-01") is None


def test_pause_on_failure_is_rendered(cfg, write_config):
    from market_timers.config import loader

    assert loader.load(cfg).job("closing-orders").pause_on_failure is True


def test_the_failure_alert_says_the_group_is_paused_and_how_to_resume(tmp_path):
    from market_timers.alerts import handler
    from market_timers.ledger.pauses import write_failure_pause

    state = tmp_path / "state"
    write_failure_pause(str(state), "orders", {"by": "pause_on_failure", "since":
                        "2025-11-28T20:51:00Z", "job": "closing-orders", "session": SESSION,
                        "note": "closing-orders failed"})
    raised = []

    class Config:
        state_dir = state

    def fake_run(argv):
        if argv[:2] == ["systemctl", "show"]:
            return ("Environment=MARKET_JOB=closing-orders MARKET_SESSION=2025-11-28 "
                    "MARKET_LOCK_GROUP=orders MARKET_PAUSE_ON_FAILURE=1\n")
        return ""

    orig = handler.raise_alert
    handler.raise_alert = lambda config, **kw: raised.append(kw)
    try:
        handler.handle(Config(), "failure", "market-closing-orders@2025-11-28-205000.service",
                       env={"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited",
                            "MONITOR_EXIT_STATUS": "3"}, run=fake_run)
    finally:
        handler.raise_alert = orig
    [alert] = raised
    assert alert["kind"] == "failed"
    assert "lock group orders is paused" in alert["title"]
    assert "market-timers resume --group orders" in alert["title"]



def test_a_member_of_the_operator_group_may_pause_and_others_may_not(write_config, monkeypatch,
                                                                     capsys, tmp_path):
    import grp
    from types import SimpleNamespace

    from market_timers.controls import access

    path = write_config(CONFIG.replace('calendar = "XNYS"',
                                       'calendar = "XNYS"\noperator_group = "market-ops"'))
    real = grp.getgrnam
    monkeypatch.setattr(access.grp, "getgrnam", lambda name: SimpleNamespace(gr_gid=4242)
                        if name == "market-ops" else real(name))
    assert main(path, "pause", "signal", "--note", "made by root") == 0  # root makes controls/
    st = os.stat(tmp_path / "state" / "controls")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 4242, 0o2775)
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setattr(os, "getgroups", lambda: [4242])
    assert main(path, "pause", "--group", "orders", "--note", "an operator") == 0
    monkeypatch.setattr(os, "getgroups", lambda: [1234])
    assert main(path, "resume", "--group", "orders") == 1
    assert "operator group 'market-ops'" in capsys.readouterr().err


@pytest.mark.parametrize("group", ["root", "market-timers", "market-jobs"])
def test_operator_group_is_never_a_group_of_the_scheduler_or_the_jobs(write_config, group):
    from market_timers.config import loader
    from market_timers.schema.problems import ConfigError

    path = write_config(CONFIG.replace('calendar = "XNYS"',
                                       f'calendar = "XNYS"\noperator_group = "{group}"'))
    with pytest.raises(ConfigError) as exc:
        loader.load(path)
    [line] = exc.value.problems.lines()
    assert line.startswith(f"{path}: operator_group: ") and repr(group) in line


def test_pause_and_resume_answer_in_json_for_scripts(cfg, capsys):
    assert main(cfg, "pause", "--group", "orders", "--until", "2025-12-01", "--note",
                "broker  maintenance", "--json") == 0
    paused = json.loads(capsys.readouterr().out)
    assert paused["action"] == "pause" and paused["scope"] == "group"
    assert paused["name"] == "orders" and paused["until"] == "2025-12-01"
    assert paused["note"] == "broker maintenance" and paused["by"] and paused["since"]
    assert main(cfg, "resume", "--group", "orders", "--json") == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed == {"action": "resume", "scope": "group", "name": "orders",
                       "ended": ["pause"], "still_paused": None, "still_halted": []}
    assert main(cfg, "resume", "--group", "orders", "--json") == 0
    assert json.loads(capsys.readouterr().out)["ended"] == []


def test_resume_of_a_job_in_json_says_what_still_holds_it(cfg, capsys):
    assert main(cfg, "pause", "signal", "--note", "x") == 0
    assert main(cfg, "pause", "--group", "orders", "--note", "desk closed") == 0
    capsys.readouterr()
    assert main(cfg, "resume", "signal", "--json") == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["ended"] == ["pause"]
    assert resumed["still_paused"]["scope"].startswith("lock group orders")
    assert resumed["still_paused"]["note"] == "desk closed"
