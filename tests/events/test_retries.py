"""Retries of idempotent jobs: the config, the units, and the runner's attempts as systemd drives
them (each start a new process with the unit's environment, --record after each attempt)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta

import pytest

from market_timers.alerts.handler import handle
from market_timers.config import loader as config
from market_timers.config.retries import backoff, window
from market_timers.contracts import exitcodes
from market_timers.ledger import runrecord
from market_timers.runner.retry import take_marker
from market_timers.schedule import render
from market_timers.schema.problems import ConfigError, Problems

RUNNER = [sys.executable, "-m", "market_timers.run"]
JOB = """
calendar = "XNYS"
[[job]]
name = "prices"
event = "open"
offset = "-1h"
command = ["/bin/true"]
grace = "1min"
timeout = "5min"
"""


def env_for(tmp_path, scheduled, retries=2, **extra) -> dict:
    env = dict(os.environ)
    env.pop("JOURNAL_STREAM", None)
    env.update(MARKET_JOB="prices", MARKET_SESSION="2025-11-28", MARKET_GRACE_SEC="60",
               MARKET_SCHEDULED_UTC=scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
               MARKET_LOCK_DIR=str(tmp_path / "run"), MARKET_STATE_DIR=str(tmp_path / "state"),
               MARKET_RETRIES=str(retries), MARKET_RETRY_DELAY_SEC="1",
               MARKET_RETRY_DELAY_MAX_SEC="4", MARKET_TIMEOUT_SEC="300")
    env.update(extra)
    return env


def attempt(env, exit_with: int) -> tuple[int, str]:
    """One systemd start: the runner execs a job exiting `exit_with` (unless it refuses), then
    ExecStopPost=--record with what systemd would pass."""
    job = [sys.executable, "-c", "import os, sys; print('attempt', os.environ['MARKET_ATTEMPT']);"
           f" sys.exit({exit_with})"]
    done = subprocess.run([*RUNNER, "--", *job], env=env, capture_output=True, text=True,
                          timeout=60)
    code = done.returncode
    result = "success" if code == 0 else "exit-code"
    subprocess.run([*RUNNER, "--record"], env={**env, "SERVICE_RESULT": result,
                                              "EXIT_CODE": "exited", "EXIT_STATUS": str(code)},
                   check=True, timeout=60)
    return code, done.stdout + done.stderr


def record(tmp_path) -> dict:
    """The run record as status and the alert handler read it (the ledger's latest attempt)."""
    return runrecord.read(tmp_path / "state", "prices", "2025-11-28") or {}


def test_the_backoff_doubles_up_to_its_cap():
    assert [backoff(n, 30, 100) for n in range(2, 7)] == [30, 60, 100, 100, 100]
    assert window(60, 300, 2, 30, 600) == 60 + 3 * 300 + (30 + 60 + 120) + 60


def test_a_retry_is_attempt_n_of_the_same_session_and_not_a_stale_start(tmp_path):
    env = env_for(tmp_path, datetime.now(UTC))
    assert attempt(env, 3)[0] == 3  # attempt 1 fails: the marker says "retry 2"
    # systemd restarts the unit later, past the job's grace (60 s): a retry, not a stale start,
    # and not "already ran" either: the ledger takes it as attempt 2 of the same session.
    late = env_for(tmp_path, datetime.now(UTC) - timedelta(seconds=90))
    code, out = attempt(late, 0)
    assert code == 0 and "attempt 2" in out
    rec = record(tmp_path)
    assert (rec["attempt"], rec["attempts"], rec["how"], rec["result"]) == (2, 2, "retry",
                                                                             "success")
    assert take_marker(env["MARKET_STATE_DIR"], "prices", "2025-11-28") is None


def test_a_second_timer_start_without_a_marker_is_still_already_ran(tmp_path):
    env = env_for(tmp_path, datetime.now(UTC))
    assert attempt(env, 0)[0] == 0
    assert attempt(env, 0)[0] == exitcodes.ALREADY_RAN


def test_a_timer_start_past_the_grace_is_still_stale(tmp_path):
    env = env_for(tmp_path, datetime.now(UTC) - timedelta(seconds=90))
    assert attempt(env, 0)[0] == exitcodes.STALE_START


def test_failing_twice_then_succeeding_with_retries_2(tmp_path):
    env = env_for(tmp_path, datetime.now(UTC))
    outcomes = [attempt(env, code)[0] for code in (3, 3, 0)]
    assert outcomes == [3, 3, 0]
    rec = record(tmp_path)
    assert (rec["attempt"], rec["result"]) == (3, "success")
    assert take_marker(env["MARKET_STATE_DIR"], "prices", "2025-11-28") is None


def test_failing_three_times_ends_with_174_keeping_the_last_attempts_result(tmp_path):
    env = env_for(tmp_path, datetime.now(UTC))
    outcomes = [attempt(env, 3)[0] for _ in range(3)]
    code, out = attempt(env, 0)  # systemd's restart after the last attempt: refused, not run
    assert outcomes == [3, 3, 3] and code == exitcodes.RETRIES_OVER == 174
    assert "all 3 attempts failed" in out
    rec = record(tmp_path)
    assert (rec["attempt"], rec["exit_status"]) == (3, "3")
    assert rec["refused_starts"] == ["retries-over"]


def test_no_retry_starts_past_grace_plus_timeout(tmp_path):
    # Attempt 1 starts 55 s late (grace 60 s) and fails at once; instant + grace + timeout (1 s)
    # comes before the next start (30 s later): the marker says over; the restart exits 174.
    env = env_for(tmp_path, datetime.now(UTC) - timedelta(seconds=55), MARKET_TIMEOUT_SEC="1")
    env.update(MARKET_RETRY_DELAY_SEC="30", MARKET_RETRY_DELAY_MAX_SEC="60")
    assert attempt(env, 3)[0] == 3
    code, out = attempt(env, 0)
    assert code == 174 and "past instant + grace + timeout" in out
    assert record(tmp_path)["attempt"] == 1


def test_the_final_alert_names_the_attempts_and_the_last_status(tmp_path, monkeypatch):
    env = env_for(tmp_path, datetime.now(UTC))
    for _ in range(4):
        attempt(env, 3)

    class Cfg:
        state_dir = tmp_path / "state"
        spool_dir = tmp_path / "spool"
        alerts = None

    unit = "market-prices@2025-11-28-133000.service"
    seen = {}
    monkeypatch.setattr("market_timers.alerts.handler.raise_alert",
                        lambda cfg, **kw: seen.update(kw))
    handle(Cfg, "failure", unit, env={"MONITOR_SERVICE_RESULT": "exit-code",
                                      "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": "174"},
           run=lambda argv: "")
    assert seen["kind"] == "failed"
    assert seen["title"] == "prices failed with exit status 3 after 3 attempts"
    assert seen["details"]["attempts"] == 3


def test_units_of_a_job_with_retries(tmp_path, write_config):
    cfg = config.load(write_config(JOB + 'retries = 2\nretry_delay = "10s"\n'
                                   'retry_delay_max = "30s"\n'))
    from market_timers.schedule.plan import plan_between

    day = date(2025, 11, 28)
    fire = plan_between(cfg, day, day)[0]
    service = render.job_units(cfg, cfg.job("prices"), fire, "/usr/bin/market-timers-run")[1].text
    for line in ("Restart=on-failure", "RestartSec=10s",
                 "RestartPreventExitStatus=170 171 172 173 174 175 176 177 178 179", "StartLimitBurst=4",
                 f"StartLimitIntervalSec={60 + 3 * 300 + 10 + 20 + 30 + 60}s",
                 "Environment=MARKET_RETRIES=2", "Environment=MARKET_TIMEOUT_SEC=300"):
        assert line in service.splitlines(), line
    unit, svc = service.split("[Service]")
    assert "StartLimitBurst" in unit and "Restart=" in svc
    plain = config.load(write_config(JOB))
    text = render.job_units(plain, plain.job("prices"), fire, "/r")[1].text
    assert "Restart" not in text and "MARKET_RETRIES" not in text


@pytest.mark.parametrize("extra, key, message", [
    ("retries = -1\n", "job.prices.retries", "0 to 10"),
    ("retries = 11\n", "job.prices.retries", "0 to 10"),
    ('retries = 1\nretry_delay = "0s"\n', "job.prices.retry_delay", "more than zero"),
    ('retries = 1\nretry_delay = "5min"\nretry_delay_max = "1min"\n',
     "job.prices.retry_delay_max", "at least retry_delay"),
    ('orders = "yes"\n', "job.prices.orders", "true or false"),
    ("retries = 1\norders = true\n", "job.prices.retries", "never retried"),
    ('retries = 1\nlock = "broker"\n[[job]]\nname = "send"\nevent = "open"\n'
     'command = ["/bin/true"]\nlock = "broker"\norders = true\n', "job.prices.retries",
     "shared with send (orders = true)"),
])
def test_bad_retry_settings_name_the_key(write_config, extra, key, message):
    with pytest.raises(ConfigError) as e:
        config.load(write_config(JOB + extra))
    assert any(f": {key}: " in line and message in line for line in e.value.problems.lines()), \
        e.value.problems.lines()


def test_a_job_of_another_lock_group_than_the_order_sender_may_retry():
    raw = {"calendar": "XNYS", "job": [
        {"name": "prices", "event": "open", "command": ["/bin/true"], "retries": 2},
        {"name": "send", "event": "open", "command": ["/bin/true"], "orders": True}]}
    problems = Problems()
    cfg = config.parse(raw, problems)
    assert not problems and cfg.job("prices").retries == 2 and cfg.job("send").orders
