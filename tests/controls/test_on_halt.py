"""`on_halt` is a job like the others (issue 45, item 4): its failure, or its absence when it is
configured, is a critical alert through the jobs' own alert path; `halt` waits for it (bounded)
and says how it ended; its unit is kept until its result has been read.

Seen on Debian 12: `halt` printed "on_halt started once", the transient unit failed ("broker
refused the mass cancel"), had no OnFailure=, was collected, and no one was told."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from tests.controls.test_halt import CONFIG, FakeSystemctl, main

from market_timers.alerts import handler
from market_timers.config import loader
from market_timers.controls import on_halt
from market_timers.host.systemctl import Systemctl, SystemctlError

CHANNELS = ('[alerts]\ndedup_minutes = 0\nrepeat_minutes = 0\n[alerts.telegram]\n'
            'chat_id = "-1"\napi_base = "http://127.0.0.1:9"\n[alerts.slack]\n')
FAILED_3 = {"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed",
            "Result": "exit-code", "ExecMainCode": "1", "ExecMainStatus": "3"}
RUNNING = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
           "Result": "success", "ExecMainCode": "0", "ExecMainStatus": "0"}


@pytest.fixture
def cfg(write_config):
    return write_config(CONFIG)


@pytest.fixture
def units(monkeypatch):
    """systemd as `halt` sees it (test_halt.py's): the running units, on_halt's unit."""
    fake = FakeSystemctl(["market-closing-orders@2025-11-28-205000.service"])
    from market_timers.host import systemctl

    monkeypatch.setattr(systemctl, "Systemctl", lambda: fake)
    return fake


@pytest.fixture
def alerts(monkeypatch):
    raised = []
    from market_timers.alerts import api

    monkeypatch.setattr(api, "raise_alert", lambda config, **kw: raised.append(kw))
    return raised


@pytest.fixture
def channels(write_config, tmp_path, monkeypatch):
    """A config with two channels and no credential: the alerts stay in the outbox."""
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "no-credentials"))
    return write_config(CONFIG.replace("[[job]]", CHANNELS + "[[job]]", 1))


def spooled(tmp_path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (tmp_path / "spool" / "outbox").glob("*.json")]


def test_the_unit_is_kept_until_its_result_is_read_and_its_failure_alerts(cfg, units, alerts):
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    [(unit, _, _, env)] = units.transient
    [properties] = units.properties
    assert f"OnFailure=market-alert-failure@{unit}.service" in properties
    assert "RemainAfterExit=yes" in properties  # a success stays to be read, a failure too
    assert env["MARKET_JOB"] == "on_halt" and env["MARKET_SEVERITY"] == "critical"
    assert env["MARKET_SESSION"].startswith("halt-")  # each halt's on_halt is its own incident


def test_two_halts_in_one_second_have_an_on_halt_each(cfg, units, alerts):
    """The unit stays once it has run: a second halt (another scope) in the same second must not
    be refused by systemd-run ("unit already exists") nor fold into the first's incident."""
    assert main(cfg, "halt", "--reason", "x", "--now", "2025-11-28T20:50:00Z") == 0
    assert main(cfg, "halt", "--job", "signal", "--reason", "y",
                "--now", "2025-11-28T20:50:00Z") == 0
    (first, _, _, one), (second, _, _, two) = units.transient
    assert first != second and one["MARKET_SESSION"] != two["MARKET_SESSION"]
    assert second == "market-on-halt-20251128T205000000-job-signal.service"
    assert two["MARKET_SESSION"] == "halt-20251128T205000Z-job-signal"


def test_systemd_run_does_not_collect_the_unit(monkeypatch):
    seen = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: seen.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "", ""))
    Systemctl().run_transient("market-on-halt-x.service", ["/bin/false"], "market-jobs",
                              {"A": "1"}, properties=["RemainAfterExit=yes"])
    [argv] = seen
    assert "--collect" not in argv and "--property=RemainAfterExit=yes" in argv
    assert argv[-2:] == ["--", "/bin/false"]


def test_halt_says_on_halt_ran(cfg, units, alerts, capsys):
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    out = capsys.readouterr().out
    assert "on_halt: started market-on-halt-" in out
    assert "on_halt ran: exit 0 (market-on-halt-" in out


def test_halt_says_on_halt_failed_and_exits_1(cfg, units, alerts, capsys):
    units.on_halt_states = [RUNNING, FAILED_3]
    assert main(cfg, "halt", "--reason", "runaway algo") == 1
    captured = capsys.readouterr()
    assert "on_halt failed: exit 3 (market-on-halt-" in captured.out
    assert "a critical alert" in captured.out
    assert "halted order jobs" in captured.out  # the halt itself holds


def test_the_halt_alert_goes_out_before_halt_waits_for_on_halt(cfg, units, alerts, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(on_halt, "WAIT_SEC", 0.3)
    monkeypatch.setattr(on_halt, "POLL_SEC", 0.05)
    units.on_halt_states = [RUNNING]
    looks = units.show
    raised_at_first_look = []

    def show(units, props):
        raised_at_first_look.append(len(alerts))
        return looks(units, props)

    units.show = show
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    assert raised_at_first_look[0] == 1 and alerts[0]["kind"] == "halt"
    out = capsys.readouterr().out
    assert "on_halt still running after 0.3 s (market-on-halt-" in out
    assert "its failure will be alerted" in out


def test_halt_answers_on_halts_outcome_in_json(cfg, units, alerts, capsys):
    units.on_halt_states = [FAILED_3]
    assert main(cfg, "halt", "--reason", "x", "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["on_halt_unit"].startswith("market-on-halt-")
    assert doc["on_halt_result"] == "failed: exit 3"


def test_an_on_halt_that_cannot_be_started_is_a_critical_alert(cfg, units, alerts, capsys):
    def refuse(unit, argv, user, env, properties=()):
        raise SystemctlError("systemd-run --unit=x: Failed to find executable "
                             "/usr/local/bin/cancel-all: No such file or directory")

    units.run_transient = refuse
    assert main(cfg, "halt", "--reason", "runaway algo") == 1
    assert "on_halt could not be started" in capsys.readouterr().err
    halt, missing = alerts
    assert halt["kind"] == "halt"
    assert (missing["kind"], missing["job"], missing["severity"]) == ("failed", "on_halt",
                                                                      "critical")
    assert missing["session"].startswith("halt-")
    assert "on_halt could not be started" in missing["title"]
    assert "/usr/local/bin/cancel-all" in missing["title"]


def test_on_halts_failure_is_a_critical_alert_of_the_jobs_failure_handler(channels, tmp_path,
                                                                          units, capsys):
    """The unit's OnFailure= runs the jobs' handler (market-alert-failure@.service): the unit's
    own environment, as halt set it, makes the alert critical and names on_halt."""
    units.on_halt_states = [FAILED_3]
    assert main(channels, "halt", "--reason", "runaway algo") == 1
    [(unit, _, _, env)] = units.transient
    shown = {"Environment": " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()),
             "SubState": "failed", "InvocationID": "a" * 32}

    def run(argv):
        if argv[0] == "journalctl":
            return "broker refused the mass cancel\n"
        return "".join(f"{k}={v}\n" for k, v in shown.items())

    monitor = {"MONITOR_UNIT": unit, "MONITOR_SERVICE_RESULT": "exit-code",
               "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": "3",
               "MONITOR_INVOCATION_ID": "a" * 32}
    handler.handle(loader.load(channels), "failure", unit, env=monitor, run=run)
    failed = [a for a in spooled(tmp_path) if a["kind"] == "failed"]
    assert failed and {a["severity"] for a in failed} == {"critical"}
    assert {a["title"] for a in failed} == {"on_halt failed with exit status 3"}
    assert "broker refused the mass cancel" in failed[0]["details"]["journal"]
    assert {c for a in failed for c in a["chain"]} >= {"telegram"}


FAILED_143 = dict(FAILED_3, ExecMainStatus="143")  # the supervisor's end of a SIGTERMed command


def test_on_halts_command_runs_under_the_runners_supervisor(cfg, units, alerts):
    """Its unit's main process turns a death by SIGTERM (which systemd counts as a clean end: no
    OnFailure=) into exit 143, whenever it comes: after halt's wait, by `systemctl stop`."""
    assert main(cfg, "halt", "--reason", "runaway algo") == 0
    [(_, argv, _, _)] = units.transient
    assert argv[0].endswith("market-timers-run")
    assert argv[1:] == ["--supervise", "--", "/usr/local/bin/cancel-all", "--everything"]


def test_halt_says_on_halt_was_killed_by_a_signal(cfg, units, alerts, capsys):
    units.on_halt_states = [RUNNING, FAILED_143]
    assert main(cfg, "halt", "--reason", "runaway algo") == 1
    out = capsys.readouterr().out
    assert "on_halt failed: killed by signal 15 (TERM) (market-on-halt-" in out
    assert "its failure handler raises a critical alert" in out
    assert [a["kind"] for a in alerts] == ["halt"]  # the handler's, not a second one of halt's


def handled(config_path, units, tmp_path, status: str) -> list[dict]:
    """What the jobs' failure handler spools for on_halt's unit ended with `status`."""
    [(unit, _, _, env)] = units.transient
    shown = {"Environment": " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()),
             "SubState": "failed", "InvocationID": "b" * 32}

    def run(argv):
        if argv[0] == "journalctl":
            return "market-timers-run: the job was killed by signal TERM\n"
        return "".join(f"{k}={v}\n" for k, v in shown.items())

    monitor = {"MONITOR_UNIT": unit, "MONITOR_SERVICE_RESULT": "exit-code",
               "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": status,
               "MONITOR_INVOCATION_ID": "b" * 32}
    handler.handle(loader.load(config_path), "failure", unit, env=monitor, run=run)
    return [a for a in spooled(tmp_path) if a["job"] == "on_halt"]


def test_an_on_halt_killed_after_halts_wait_is_a_critical_alert_naming_the_signal(
        channels, tmp_path, units, capsys):
    units.on_halt_states = [RUNNING]
    on_halt.WAIT_SEC, saved = 0.0, on_halt.WAIT_SEC
    try:
        assert main(channels, "halt", "--reason", "runaway algo") == 0
    finally:
        on_halt.WAIT_SEC = saved
    failed = handled(channels, units, tmp_path, "143")
    assert failed and {a["severity"] for a in failed} == {"critical"}
    assert {a["title"] for a in failed} == {"on_halt was killed by signal 15 (TERM)"}


def test_on_halts_own_exit_178_is_its_failure_not_a_refusal_of_the_runner(channels, tmp_path,
                                                                          units, capsys):
    units.on_halt_states = [FAILED_3]
    main(channels, "halt", "--reason", "runaway algo")
    failed = handled(channels, units, tmp_path, "178")
    assert {a["title"] for a in failed} == {"on_halt failed with exit status 178"}
    assert {a["severity"] for a in failed} == {"critical"}


def test_two_halts_of_one_scope_in_one_second_are_two_on_halt_incidents():
    """Halted, resumed and halted again within a second (test_halt on a fast host): the second
    on_halt's unit and alerts are its own, not the first's (same name: systemd-run refused it)."""
    from datetime import UTC, datetime

    from market_timers.contracts.unitname import on_halt_unit
    from market_timers.controls.on_halt import session_of

    record = {"scope": "orders"}
    first = datetime(2026, 12, 5, 18, 33, 36, 120_000, tzinfo=UTC)
    second = first.replace(microsecond=870_000)
    assert session_of(record, first) != session_of(record, second)
    assert on_halt_unit(first, "orders") != on_halt_unit(second, "orders")
    assert session_of(record, first) == "halt-20261205T183336.120Z-orders"
