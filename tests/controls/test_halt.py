"""The kill switch: `market-timers halt [--group G | --job J | --all] --reason TEXT` and `resume`;
a start of a halted job is refused whoever starts it (exit 178), recorded as halted (not missed,
not alerted again); the running units are stopped; `on_halt` runs once per halt."""

from __future__ import annotations

import json
import os

import pytest
from tests.runner.test_runner import context, record, run, ticket

from market_timers import cli
from market_timers.contracts import exitcodes, outcomes
from market_timers.ledger import halts

SESSION = "2025-11-28"
CONFIG = """
calendar = "XNYS"
on_halt = ["/usr/local/bin/cancel-all", "--everything"]
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

[[job]]
name = "statement"
event = "close"
offset = "30min"
command = ["/usr/bin/true"]
"""


class FakeSystemctl:
    """What `halt` asks systemd: which units run, stop them, start on_halt."""

    def __init__(self, running=()):
        self.units = list(running)
        self.stopped: list[str] = []
        self.transient: list[tuple] = []
        self.properties: list[list[str]] = []  # each transient unit's -p settings
        # how on_halt's unit stands at each look (`systemctl show`): by default it ran, exit 0
        self.on_halt_states = [{"LoadState": "loaded", "ActiveState": "active",
                                "SubState": "exited", "Result": "success", "ExecMainCode": "1",
                                "ExecMainStatus": "0"}]
        self.looks = 0

    def running(self, patterns):
        import fnmatch

        return [u for u in self.units if any(fnmatch.fnmatch(u, p) for p in patterns)]

    def stop(self, units):
        self.stopped += units
        self.units = [u for u in self.units if u not in units]

    def run_transient(self, unit, argv, user, env, properties=()):
        self.transient.append((unit, argv, user, env))
        self.properties.append(list(properties))

    def show(self, units, props):
        state = self.on_halt_states[min(self.looks, len(self.on_halt_states) - 1)]
        self.looks += 1
        return {u: dict(state) for u in units}


@pytest.fixture
def cfg(write_config):
    return write_config(CONFIG)


@pytest.fixture
def systemd(monkeypatch):
    fake = FakeSystemctl(["market-closing-orders@2025-11-28-205000.service",
                          "market-statement@2025-11-28-213000.service"])
    from market_timers.host import systemctl

    monkeypatch.setattr(systemctl, "Systemctl", lambda: fake)
    return fake


@pytest.fixture
def alerts(monkeypatch):
    raised = []
    from market_timers.alerts import api

    monkeypatch.setattr(api, "raise_alert", lambda config, **kw: raised.append(kw))
    return raised


def main(cfg, *args) -> int:
    return cli.main(["--config", str(cfg), *args])


def orders_context(tmp_path, **extra):
    return context(tmp_path, MARKET_JOB="closing-orders", MARKET_ORDERS="1", **extra)


def test_a_halt_refuses_every_start_of_an_order_job_with_its_own_code(tmp_path, cfg, systemd,
                                                                       alerts, capsys):
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    assert "halted order jobs" in capsys.readouterr().out
    marker = tmp_path / "ran"
    proc = run(orders_context(tmp_path), "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.HALTED == 178
    assert not marker.exists()
    assert "halted" in proc.stderr and "runaway algo" in proc.stderr
    assert "market-timers resume --orders" in proc.stderr
    refused = record(tmp_path, "closing-orders")
    assert refused["refused"] == "halted" and refused["reason"] == "runaway algo"
    assert outcomes.classify("exit-code", "exited", "178") == "halted"
    assert outcomes.result_text("exit-code", "178") == "halted (exit 178)"


def test_a_non_order_job_keeps_running_under_the_orders_halt(tmp_path, cfg, systemd, alerts):
    assert main(cfg, "halt", "--reason", "x") == 0
    assert run(context(tmp_path), "/usr/bin/true").returncode == 0


def test_the_operators_run_is_refused_too(tmp_path, cfg, systemd, alerts):
    """Unlike a pause, a halt holds the operator's `market-timers run` (its ticket) and --force."""
    assert main(cfg, "halt", "--job", "signal", "--reason", "x") == 0
    env = context(tmp_path, **ticket(tmp_path, "n1", force=True))
    proc = run(env, "/usr/bin/true")
    assert proc.returncode == exitcodes.HALTED, proc.stderr


def test_scopes_group_job_and_all(tmp_path, cfg, systemd, alerts):
    assert main(cfg, "halt", "--group", "orders", "--reason", "x") == 0
    assert run(context(tmp_path), "/usr/bin/true").returncode == exitcodes.HALTED
    statement = context(tmp_path, MARKET_JOB="statement", MARKET_LOCK_GROUP="statement")
    assert run(statement, "/usr/bin/true").returncode == 0
    assert main(cfg, "halt", "--all", "--reason", "x") == 0
    later = context(tmp_path, MARKET_JOB="statement", MARKET_LOCK_GROUP="statement",
                    MARKET_SESSION="2025-12-01")
    assert run(later, "/usr/bin/true").returncode == exitcodes.HALTED
    assert main(cfg, "resume", "--all") == 0
    assert run(later, "/usr/bin/true").returncode == 0


def test_halt_stops_the_running_units_it_covers_and_runs_on_halt_once(cfg, systemd, alerts,
                                                                       capsys):
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    out = capsys.readouterr().out
    assert systemd.stopped == ["market-closing-orders@2025-11-28-205000.service"]
    assert "market-closing-orders@2025-11-28-205000.service" in out
    [(unit, argv, user, env)] = systemd.transient
    assert argv[-3:] == ["--", "/usr/local/bin/cancel-all", "--everything"]  # supervised
    assert user == "market-jobs" and unit.startswith("market-on-halt-")
    assert env["MARKET_HALT_REASON"] == "runaway algo"
    assert env["MARKET_HALT_SCOPE"].startswith("order jobs")
    assert env["MARKET_HALT_BY"] and env["MARKET_HALT_HOST"] == os.uname().nodename
    [alert] = alerts
    assert alert["kind"] == "halt" and alert["severity"] == "critical"
    assert alert["title"].startswith("HALT: order jobs") and "runaway algo" in alert["title"]
    # the same scope again: nothing new is run nor alerted, the record keeps its first reason
    assert main(cfg, "halt", "--reason", "again") == 0
    assert len(systemd.transient) == 1 and len(alerts) == 1
    assert "already halted" in capsys.readouterr().out
    assert halts.current(str(cfg.parent / "state"))[0]["reason"] == "runaway algo"


def test_resume_lifts_the_halt_alerts_and_lets_the_next_session_run(tmp_path, cfg, systemd,
                                                                    alerts, capsys):
    assert main(cfg, "halt", "--reason", "x") == 0
    assert run(orders_context(tmp_path), "/usr/bin/true").returncode == exitcodes.HALTED
    assert main(cfg, "resume") == 0
    assert "ended the halt of order jobs" in capsys.readouterr().out
    assert alerts[-1]["kind"] == "halt-lifted"
    env = orders_context(tmp_path, MARKET_SESSION="2025-12-01")
    assert run(env, "/usr/bin/true").returncode == 0


def test_a_halt_is_a_record_on_disk_read_fresh_by_every_start(tmp_path, cfg, systemd, alerts):
    """Across a restart (of the process, of the host): the record is read at each start."""
    assert main(cfg, "halt", "--job", "signal", "--reason", "x") == 0
    path = tmp_path / "state" / "controls" / "halt-job-signal"
    fields = dict(line.split("=", 1) for line in path.read_text().splitlines())
    assert fields["scope"] == "job" and fields["name"] == "signal" and fields["reason"] == "x"
    assert fields["by"] and fields["since"] and fields["host"]
    st = os.stat(tmp_path / "state" / "controls")
    assert st.st_uid == 0 and not st.st_mode & 0o002
    assert run(context(tmp_path), "/usr/bin/true").returncode == exitcodes.HALTED


def test_a_halt_record_in_a_directory_someone_else_owns_is_ignored(tmp_path):
    state = tmp_path / "state"
    (state / "controls").mkdir(parents=True)
    (state / "controls" / "halt-all").write_text("reason=x\n")
    os.chown(state / "controls", 1234, 1234)
    assert halts.halted(str(state), "signal", "orders", True) is None


def test_halt_and_resume_are_refused_to_a_user_who_is_not_root_nor_an_operator(cfg, systemd,
                                                                               monkeypatch,
                                                                               capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setattr(os, "getgroups", lambda: [1234])
    assert main(cfg, "halt", "--reason", "x") == 1
    assert "root" in capsys.readouterr().err
    assert main(cfg, "resume", "--all") == 1
    assert systemd.stopped == [] and systemd.transient == []


def test_halt_names_an_unknown_job_or_group_and_needs_a_reason(cfg, systemd, capsys):
    assert main(cfg, "halt", "--job", "signl", "--reason", "x") == 2
    assert "signl" in capsys.readouterr().err
    assert main(cfg, "halt", "--group", "nope", "--reason", "x") == 2
    with pytest.raises(SystemExit):
        main(cfg, "halt")


def test_halt_and_resume_answer_in_json(cfg, systemd, alerts, capsys):
    assert main(cfg, "halt", "--group", "orders", "--reason", "desk  closed", "--json") == 0
    halted = json.loads(capsys.readouterr().out)
    assert halted["action"] == "halt" and halted["scope"] == "group" and halted["new"] is True
    assert halted["name"] == "orders" and halted["reason"] == "desk closed"
    assert halted["jobs"] == ["signal", "closing-orders"]
    assert halted["stopped"] == ["market-closing-orders@2025-11-28-205000.service"]
    assert halted["on_halt_unit"].startswith("market-on-halt-")
    assert main(cfg, "halt", "--job", "signal", "--reason", "y") == 0
    capsys.readouterr()
    assert main(cfg, "resume", "--group", "orders", "--json") == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["ended"] == ["halt"]
    assert [h["what"] for h in resumed["still_halted"]] == ["job signal"]


def test_resume_says_another_halt_still_holds_the_job(cfg, systemd, alerts, capsys):
    assert main(cfg, "halt", "--reason", "x") == 0
    assert main(cfg, "halt", "--job", "closing-orders", "--reason", "y") == 0
    capsys.readouterr()
    assert main(cfg, "resume", "closing-orders") == 0
    out = capsys.readouterr().out
    assert "still halted: order jobs" in out and "market-timers resume --orders" in out


@pytest.mark.parametrize("value, why", [
    ('"/bin/cancel"', "array"),
    ('["cancel-all"]', "absolute"),
    ("[]", "empty"),
])
def test_on_halt_is_checked_like_a_job_command(write_config, value, why):
    from market_timers.config import loader
    from market_timers.schema.problems import ConfigError

    path = write_config(CONFIG.replace('on_halt = ["/usr/local/bin/cancel-all", "--everything"]',
                                       f"on_halt = {value}"))
    with pytest.raises(ConfigError) as exc:
        loader.load(path)
    [line] = exc.value.problems.lines()
    assert line.startswith(f"{path}: on_halt") and why in line


def test_an_order_job_is_rendered_with_its_orders_flag(cfg):
    from market_timers.config import loader
    from market_timers.schedule import unitenv

    config = loader.load(cfg)
    env = dict(unitenv.job_environment(config, config.job("closing-orders"), []))
    assert env["MARKET_ORDERS"] == "1"
    assert "MARKET_ORDERS" not in dict(unitenv.job_environment(config, config.job("signal"), []))


def test_a_halted_start_raises_no_alert_of_its_own(tmp_path):
    from market_timers.alerts import handler

    raised = []

    class Config:
        state_dir = tmp_path / "state"

    orig = handler.raise_alert
    handler.raise_alert = lambda config, **kw: raised.append(kw)
    try:
        handler.handle(Config(), "failure", "market-closing-orders@2025-11-28-205000.service",
                       env={"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited",
                            "MONITOR_EXIT_STATUS": "178"},
                       run=lambda argv: "Environment=MARKET_JOB=closing-orders "
                                        "MARKET_SESSION=2025-11-28\n")
    finally:
        handler.raise_alert = orig
    assert raised == []



def test_the_halt_and_its_lifting_are_spooled_for_every_channel(write_config, tmp_path, systemd,
                                                                monkeypatch):
    """The real alert path (no credential here: the alerts stay in the outbox, one a channel)."""
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "no-credentials"))
    alerts = ('[alerts]\ndedup_minutes = 0\nrepeat_minutes = 0\n[alerts.telegram]\n'
              'chat_id = "-1"\napi_base = "http://127.0.0.1:9"\n[alerts.slack]\n')
    path = write_config(CONFIG.replace("[[job]]", alerts + "[[job]]", 1))
    assert main(path, "halt", "--reason", "runaway algo") == 0
    spooled = [json.loads(p.read_text()) for p in (tmp_path / "spool" / "outbox").glob("*.json")]
    assert sorted(a["chain"][0] for a in spooled) == ["slack", "telegram"]
    assert {a["title"] for a in spooled} == {
        f"HALT: order jobs (orders = true) halted by {spooled[0]['details']['by']} on "
        f"{os.uname().nodename}: runaway algo"}
    assert {a["severity"] for a in spooled} == {"critical"}
    assert main(path, "resume") == 0
    spooled = [json.loads(p.read_text()) for p in (tmp_path / "spool" / "outbox").glob("*.json")]
    assert sum(a["title"].startswith("halt lifted: order jobs") for a in spooled) == 2


def test_a_run_the_halt_stopped_is_recorded_as_stopped_by_it(tmp_path, cfg, systemd, alerts):
    """systemd calls the SIGTERM of a stop a success: the record step says the halt stopped it."""
    import subprocess
    import sys

    env = orders_context(tmp_path, INVOCATION_ID="inv1")
    assert run(env, "/usr/bin/true").returncode == 0
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    env.update(SERVICE_RESULT="success", EXIT_CODE="killed", EXIT_STATUS="TERM")
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record"], env=env, check=True,
                   timeout=30)
    stopped = record(tmp_path, "closing-orders")
    assert stopped["stopped_by_halt"] == "order jobs (orders = true): runaway algo"


def test_a_unit_that_could_not_be_stopped_is_named_and_fails_the_halt(cfg, systemd, alerts,
                                                                      capsys):
    systemd.stop = lambda units: None  # systemd refused (an operator who is not root)
    assert main(cfg, "halt", "--reason", "x") == 1
    captured = capsys.readouterr()
    assert "could not stop market-closing-orders@2025-11-28-205000.service" in captured.err
    assert "stopped: none\n" in captured.out
    assert halts.current(str(cfg.parent / "state"))  # the halt itself holds


def test_a_halt_in_a_cluster_whose_ledger_it_cannot_read_holds_this_node_and_fails(
        write_config, systemd, alerts, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(tmp_path / "no-such-dsn"))
    path = write_config(CONFIG + "\n[cluster]\n")
    assert main(path, "halt", "--reason", "x") == exitcodes.FAILURE
    assert "holds on this node only" in capsys.readouterr().err
    assert halts.halted(str(tmp_path / "state"), "closing-orders", "orders", True) is not None


def test_a_halted_job_started_late_is_halted_not_a_stale_start(tmp_path, cfg, systemd, alerts):
    """A stale start is a critical alert; a halted job's late start (a catch-up) must not be."""
    from datetime import UTC, datetime, timedelta

    assert main(cfg, "halt", "--reason", "x") == 0
    env = context(tmp_path, datetime.now(UTC) - timedelta(hours=2), MARKET_JOB="closing-orders",
                  MARKET_ORDERS="1")
    assert run(env, "/usr/bin/true").returncode == exitcodes.HALTED
