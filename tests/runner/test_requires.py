"""`requires`: a job starts for a session only if each job it requires succeeded in that session;
otherwise the runner refuses it with its own exit code (176), names the upstream and its state,
and takes no claim (a later `market-timers run --session` works once the upstream succeeded)."""

from __future__ import annotations

import json

import pytest
from tests.config.test_config import at
from tests.runner.test_runner import context, record, run

from market_timers.alerts import handler
from market_timers.config import loader as config
from market_timers.contracts import exitcodes, outcomes
from market_timers.ledger import runrecord
from market_timers.schema.problems import ConfigError

SESSION = "2025-11-28"


def downstream(tmp_path, **extra):
    return context(tmp_path, MARKET_JOB="orders", MARKET_REQUIRES="signal", **extra)


def upstream(tmp_path, **fields):
    runrecord.update(tmp_path / "state", "signal", SESSION, **fields)


def test_failed_upstream_refuses_the_downstream_with_its_own_code(tmp_path):
    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z",
             result="exit-code", exit_status="3")
    marker = tmp_path / "ran"
    proc = run(downstream(tmp_path), "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.REQUIRES_UNMET == 176
    assert not marker.exists()
    assert "requires signal" in proc.stderr and "failed (exit 3)" in proc.stderr
    refused = record(tmp_path, "orders")
    assert refused["refused"] == "requires-unmet"
    assert refused["upstream"] == "signal" and refused["upstream_state"] == "failed (exit 3)"


def test_succeeded_upstream_lets_the_downstream_run(tmp_path):
    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z", result="success",
             exit_status="0")
    marker = tmp_path / "ran"
    proc = run(downstream(tmp_path), "/usr/bin/touch", str(marker))
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()


@pytest.mark.parametrize(("fields", "state"), [
    ({}, "missed (it never started)"),
    ({"refused": "stale-start", "started_utc": "2025-11-28T20:47:00Z"},
     "refused (stale-start)"),
    ({"host": "a", "pid": 1, "started_utc": "2025-11-28T20:45:00Z"}, "still running"),
])
def test_upstream_state_is_named(tmp_path, fields, state):
    if fields:
        upstream(tmp_path, **fields)
    proc = run(downstream(tmp_path), "/usr/bin/true")
    assert proc.returncode == exitcodes.REQUIRES_UNMET, proc.stderr
    assert state in proc.stderr
    assert record(tmp_path, "orders")["upstream_state"].startswith(state.split(" (")[0])


def test_refused_start_takes_no_claim_so_a_later_start_runs(tmp_path):
    assert run(downstream(tmp_path), "/usr/bin/true").returncode == exitcodes.REQUIRES_UNMET
    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z", result="success")
    marker = tmp_path / "ran"
    proc = run(downstream(tmp_path), "/usr/bin/touch", str(marker))
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()


def test_every_upstream_is_checked(tmp_path):
    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z", result="success")
    proc = run(context(tmp_path, MARKET_JOB="orders", MARKET_REQUIRES="signal,prices"),
               "/usr/bin/true")
    assert proc.returncode == exitcodes.REQUIRES_UNMET
    assert "requires prices" in proc.stderr and "signal" not in proc.stderr.split("requires")[1]


def test_stale_start_is_judged_before_the_upstream(tmp_path):
    from datetime import UTC, datetime, timedelta

    env = downstream(tmp_path, MARKET_SCHEDULED_UTC=(datetime.now(UTC) - timedelta(seconds=90))
                     .strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert run(env, "/usr/bin/true").returncode == exitcodes.STALE_START


def test_exit_code_is_classified_and_never_retried():
    from market_timers.config.retries import REFUSALS

    assert outcomes.classify("exit-code", "exited", "176") == "requires-unmet"
    assert "176" in REFUSALS.split()
    assert outcomes.result_text("exit-code", "176") == "requires unmet (exit 176)"


def test_alert_title_names_the_upstream_and_its_state(tmp_path):
    state = tmp_path / "state"
    runrecord.update(state, "orders", SESSION, refused="requires-unmet", upstream="signal",
                     upstream_state="failed (exit 3)", started_utc="2025-11-28T20:50:00Z")
    raised = []

    class Config:
        state_dir = state

    def fake_raise(config, **kw):
        raised.append(kw)

    def fake_run(argv):
        if argv[:2] == ["systemctl", "show"]:
            return "Environment=MARKET_JOB=orders MARKET_SESSION=2025-11-28\n"
        return ""

    orig = handler.raise_alert
    handler.raise_alert = fake_raise
    try:
        handler.handle(Config(), "failure", "market-orders@2025-11-28-205000.service",
                       env={"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited",
                            "MONITOR_EXIT_STATUS": "176"}, run=fake_run)
    finally:
        handler.raise_alert = orig
    [alert] = raised
    assert alert["kind"] == "requires-unmet"
    assert "signal" in alert["title"] and "failed (exit 3)" in alert["title"]
    assert "market-timers run orders --session 2025-11-28" in alert["title"] or \
        "market-timers run orders --session 2025-11-28" in str(alert["details"])


JOBS = """
calendar = "XNYS"
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
{signal_extra}
[[job]]
name = "orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
requires = {requires}
"""


def problems(write_config, requires, signal_extra=""):
    path = write_config(JOBS.format(requires=requires, signal_extra=signal_extra))
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    return path, exc.value.problems.lines()


def test_requires_is_parsed(write_config):
    cfg = config.load(write_config(JOBS.format(requires='["signal"]', signal_extra="")))
    assert cfg.job("orders").requires == ("signal",)
    assert cfg.job("signal").requires == ()


def test_unknown_upstream_names_file_key_and_value(write_config):
    path, [line] = problems(write_config, '["signl"]')
    assert at(line, path, "job.orders.requires[0]: ") and "'signl'" in line
    assert "no job" in line


def test_cycle_is_a_config_error(write_config):
    path, lines = problems(write_config, '["signal"]', 'requires = ["orders"]')
    assert any(at(line, path, "job.signal.requires") and "cycle" in line
               and "signal -> orders -> signal" in line for line in lines), lines


def test_requiring_itself_is_a_cycle(write_config):
    _, lines = problems(write_config, '["orders"]')
    assert any("cycle" in line for line in lines), lines


def test_disabled_upstream_is_named(write_config):
    _, [line] = problems(write_config, '["signal"]', "enabled = false")
    assert "disabled" in line


def test_periodic_or_daily_upstream_is_refused(write_config):
    text = JOBS.format(requires='["nightly"]', signal_extra="") + \
        '[[job]]\nname = "nightly"\nat = "02:30 UTC"\ncommand = ["/usr/bin/true"]\n'
    with pytest.raises(ConfigError) as exc:
        config.load(write_config(text))
    [line] = exc.value.problems.lines()
    assert "job.orders.requires[0]" in line and "session" in line


def test_plan_json_names_each_fires_upstream_jobs(write_config, capsys):
    from market_timers import cli

    path = write_config(JOBS.format(requires='["signal"]', signal_extra=""))
    assert cli.main(["--config", str(path), "plan", "--from", "2025-11-28", "--to", "2025-11-28",
                     "--json"]) == 0
    fires = {f["job"]: f for f in json.loads(capsys.readouterr().out)}
    assert fires["orders"]["requires"] == ["signal"]
    assert "requires" not in fires["signal"]
    assert fires["orders"]["fire_utc"] == "2025-11-28T17:50:00Z"  # 13:00 early close, -10 min


# requires_wait (issue 42): a start may wait, bounded, for an upstream still to finish ----------

def finish_upstream_after(tmp_path, seconds: float, **fields):
    """The upstream ends (or starts, then ends) `seconds` from now, while the downstream waits."""
    import threading

    timer = threading.Timer(seconds, upstream, args=(tmp_path,), kwargs=fields)
    timer.start()
    return timer


@pytest.mark.parametrize("before", [
    {"host": "a", "pid": 1, "started_utc": "2025-11-28T20:45:00Z"},  # still running
    {},  # not started yet: connect and reconcile both at 09:00
])
def test_a_start_waits_for_an_upstream_still_to_finish_and_then_runs(tmp_path, before):
    if before:
        upstream(tmp_path, **before)
    marker = tmp_path / "ran"
    timer = finish_upstream_after(tmp_path, 1.0, host="a", pid=1,
                                  started_utc="2025-11-28T20:45:00Z", result="success",
                                  exit_status="0")
    proc = run(downstream(tmp_path, MARKET_REQUIRES_WAIT_SEC="20"), "/usr/bin/touch",
               str(marker))
    timer.join()
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    assert "waits up to 20 s for signal" in proc.stderr


def test_the_wait_running_out_refuses_as_without_it(tmp_path):
    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z")
    proc = run(downstream(tmp_path, MARKET_REQUIRES_WAIT_SEC="1"), "/usr/bin/true")
    assert proc.returncode == exitcodes.REQUIRES_UNMET, proc.stderr
    assert "still running" in proc.stderr and "waits up to 1 s" in proc.stderr
    assert record(tmp_path, "orders")["upstream_state"].startswith("still running")


def test_a_failed_upstream_is_not_waited_for(tmp_path):
    import time

    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z",
             result="exit-code", exit_status="3")
    began = time.monotonic()
    proc = run(downstream(tmp_path, MARKET_REQUIRES_WAIT_SEC="20"), "/usr/bin/true")
    assert proc.returncode == exitcodes.REQUIRES_UNMET
    assert "failed (exit 3)" in proc.stderr and "waits" not in proc.stderr
    assert time.monotonic() - began < 15  # refused at once, not after the wait


def test_the_wait_ends_with_the_grace(tmp_path):
    """A start already late waits no later than its instant + grace: past that it would be a
    stale start."""
    from datetime import UTC, datetime, timedelta

    upstream(tmp_path, host="a", pid=1, started_utc="2025-11-28T20:45:00Z")
    env = downstream(tmp_path, MARKET_REQUIRES_WAIT_SEC="60", MARKET_GRACE_SEC="60",
                     MARKET_SCHEDULED_UTC=(datetime.now(UTC) - timedelta(seconds=58))
                     .strftime("%Y-%m-%dT%H:%M:%SZ"))
    proc = run(env, "/usr/bin/true")
    assert proc.returncode == exitcodes.REQUIRES_UNMET, proc.stderr
    assert "still running" in proc.stderr


@pytest.mark.parametrize(("extra", "words"), [
    ('requires_wait = "2min"\n', None),
    ('requires_wait = "3min"\n', "at most the job's grace (120 s)"),
    ('requires_wait = "soon"\n', "cannot parse"),
])
def test_requires_wait_is_checked_against_the_grace(write_config, extra, words):
    text = JOBS.format(requires='["signal"]', signal_extra="") + extra
    if words is None:
        assert config.load(write_config(text)).job("orders").requires_wait == 120
        return
    with pytest.raises(ConfigError) as exc:
        config.load(write_config(text))
    [line] = exc.value.problems.lines()
    assert ": job.orders.requires_wait: " in line and words in line, line


def test_requires_wait_without_requires_is_refused(write_config):
    text = JOBS.format(requires='["signal"]', signal_extra='requires_wait = "1min"')
    with pytest.raises(ConfigError) as exc:
        config.load(write_config(text))
    [line] = exc.value.problems.lines()
    assert ": job.signal.requires_wait: " in line and "only with `requires`" in line, line


def test_requires_wait_reaches_the_unit_and_its_time_limit(write_config):
    from datetime import UTC, datetime

    from market_timers.schedule import render
    from market_timers.schedule.plan import plan_ahead

    cfg = config.load(write_config(JOBS.format(requires='["signal"]', signal_extra="")
                                   + 'requires_wait = "90s"\ntimeout = "5min"\n'))
    units = {u.name: u.text for u in render.render_all(
        cfg, plan_ahead(cfg, datetime(2025, 11, 26, 12, tzinfo=UTC)), "/r")}
    service = next(t for n, t in units.items() if n.startswith("market-orders@")
                   and n.endswith(".service"))
    assert "Environment=MARKET_REQUIRES_WAIT_SEC=90\n" in service
    assert "RuntimeMaxSec=392s\n" in service  # timeout + lead + the wait
