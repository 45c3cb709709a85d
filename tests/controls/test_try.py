"""`market-timers try JOB` against a recording systemctl: a one-off run that is no session's run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.schedule.test_render import parse_unit, values

from market_timers import cli
from market_timers.config import loader as config
from market_timers.controls import trial
from market_timers.host import systemctl

CONFIG = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
timeout = "10min"
[[job]]
name = "nightly"
at = "{AT}"
command = ["/usr/bin/true"]
"""
NOW = "2025-11-26T12:00:00Z"  # a Wednesday; the close is 21:00 UTC
# The daily jobs' time, far from NOW and from the real clock: the tests without --now would
# otherwise meet a planned run inside their try's timeout (red between 02:00 and 02:30 UTC).
AT = "18:00 UTC" if 1 <= datetime.now(UTC).hour < 3 else "02:30 UTC"
CONFIG = CONFIG.replace("{AT}", AT)


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


def test_try_writes_a_one_off_timer_seconds_ahead_and_starts_it(write_config, runtime, capsys):
    path = write_config(CONFIG)
    assert cli.main(["try", "signal", "--config", str(path), "--now", NOW]) == 0
    stem = "market-signal@try-20251126T120005Z"
    assert Recorder.started == [[f"{stem}.timer"]]
    timer = parse_unit((runtime / f"{stem}.timer").read_text())
    service = parse_unit((runtime / f"{stem}.service").read_text())
    assert values(timer, "Timer", "OnCalendar") == ["2025-11-26 12:00:03 UTC"]  # lead 2s
    assert values(timer, "Timer", "Persistent") == ["false"]  # no stamp left behind
    env = values(service, "Service", "Environment")
    assert "MARKET_SESSION=try-20251126T120005Z" in env
    assert "MARKET_SCHEDULED_UTC=2025-11-26T12:00:05Z" in env
    assert not any(v.startswith("MARKET_SESSION=2025") for v in env)
    # A successful try must not close the alerts of a real run; a failing one still alerts,
    # from its end record (no handler unit of its own: tests/alerts/test_end_records.py).
    assert values(service, "Unit", "OnSuccess") == []
    assert values(service, "Unit", "OnFailure") == []
    assert values(service, "Service", "ExecStopPost")[0].endswith(" --record %n")
    out = capsys.readouterr().out
    assert f"started {stem}.timer" in out and f"journalctl -f -u {stem}.service" in out
    # Nothing in the live unit directory: sync and the deadman never see a try.
    assert not config.load(path).unit_dir.exists()


def test_try_of_a_daily_job_and_a_chosen_delay(write_config, runtime):
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "try", "nightly", "--in", "30"]) == 0
    service = (runtime / "market-nightly@try-20251126T120030Z.service").read_text()
    assert "MARKET_SCHEDULED_UTC=2025-11-26T12:00:30Z" in service


def test_try_refuses_when_a_planned_run_of_its_lock_group_falls_within_it(write_config, runtime,
                                                                         capsys):
    path = write_config(CONFIG)
    # 20:40 UTC: the planned 20:45 run would find the lock held by a try lasting up to 10min.
    assert cli.main(["--config", str(path), "--now", "2025-11-26T20:40:00Z", "try",
                     "signal"]) == 1
    err = capsys.readouterr().err
    assert "signal's planned run for XNYS 2025-11-26 at 2025-11-26T20:45:00Z" in err
    assert Recorder.started == [] and not runtime.exists()


def test_try_of_an_unknown_job_names_the_jobs(write_config, runtime, capsys):
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "try", "signl"]) == 2
    err = capsys.readouterr().err
    assert "no job named 'signl'" in err and "(jobs: signal, nightly)" in err


def test_try_without_root_says_so(write_config, tmp_path, monkeypatch, capsys):
    import errno

    def denied(path, text, mode=0o644, **_):
        raise OSError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(trial, "write_atomic", denied)
    monkeypatch.setattr(systemctl, "Systemctl", Recorder)
    Recorder.started = []
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", NOW, "try", "signal"]) == 1
    assert "cannot write the try's units" in capsys.readouterr().err
    assert Recorder.started == []



class SystemdRuns:
    """systemctl for `halt` and `try`: a try's timer fires at once (its service's runner runs,
    under an invocation id of its own) and `show` tells that invocation."""

    units: dict = {}
    directory = None

    def start(self, units):
        from tests.controls.test_manual_run import start_as_systemd_would

        for timer in units:
            service = timer.replace(".timer", ".service")
            SystemdRuns.units[service] = f"{len(SystemdRuns.units) + 1:032x}"
            start_as_systemd_would(SystemdRuns.directory, service, SystemdRuns.units[service])

    def show(self, units, props):
        return {u: {"InvocationID": SystemdRuns.units.get(u, ""), "ActiveState": "inactive"}
                for u in units}

    def running(self, patterns):
        return []

    def stop(self, units):
        pass

    def run_transient(self, unit, argv, user, env):
        pass


def test_a_try_of_a_halted_job_says_refused_and_exits_non_zero(write_config, tmp_path,
                                                               monkeypatch, capsys):
    monkeypatch.setattr(trial, "RUNTIME_UNIT_DIR", tmp_path / "run-units")
    monkeypatch.setattr(systemctl, "Systemctl", SystemdRuns)
    SystemdRuns.units, SystemdRuns.directory = {}, tmp_path
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "halt", "--job", "nightly", "--reason",
                     "desk says no"]) == 0
    capsys.readouterr()
    assert cli.main(["--config", str(path), "try", "nightly", "--in", "5"]) == 1  # 5: the least a 2 s lead allows
    err = capsys.readouterr().err
    assert "refused: halted: nightly is halted (market-timers halt)" in err
    assert "desk says no" in err


class SystemdRunsToTheEnd(SystemdRuns):
    """A try's service runs at once to its end: ExecStart=, then ExecStopPost= (the record step)
    with the SERVICE_RESULT, EXIT_CODE and EXIT_STATUS systemd gives it."""

    ends: dict = {}

    def start(self, units):
        from tests.controls.test_manual_run import start_as_systemd_would

        for timer in units:
            service = timer.replace(".timer", ".service")
            invocation = SystemdRuns.units[service] = f"{len(SystemdRuns.units) + 1:032x}"
            status = start_as_systemd_would(SystemdRuns.directory, service, invocation).returncode
            ended = {"SERVICE_RESULT": "success" if status == 0 else "exit-code",
                     "EXIT_CODE": "exited", "EXIT_STATUS": str(status)}
            start_as_systemd_would(SystemdRuns.directory, service, invocation,
                                   step="ExecStopPost=", extra=ended)
            SystemdRunsToTheEnd.ends[service] = ended

    def show(self, units, props):
        return {u: {"InvocationID": SystemdRuns.units.get(u, ""),
                    "ActiveState": "inactive" if self.ends[u]["EXIT_STATUS"] == "0" else "failed",
                    "Result": self.ends[u]["SERVICE_RESULT"],
                    "ExecMainStatus": self.ends[u]["EXIT_STATUS"]} for u in units}


WAITED = CONFIG + """
[[job]]
name = "exits3"
at = "{AT}"
command = ["/bin/sh", "-c", "exit 3"]
""".replace("{AT}", AT)


@pytest.mark.parametrize(("job", "code", "said"), [
    ("nightly", 0, "nightly ended: ok: succeeded"),
    ("exits3", 1, "exits3 ended: failed: exits3 failed with exit status 3"),
])
def test_try_wait_says_how_the_run_ended_and_exits_by_its_outcome(
        write_config, tmp_path, monkeypatch, capsys, job, code, said):
    monkeypatch.setattr(trial, "RUNTIME_UNIT_DIR", tmp_path / "run-units")
    monkeypatch.setattr(systemctl, "Systemctl", SystemdRunsToTheEnd)
    SystemdRuns.units, SystemdRuns.directory, SystemdRunsToTheEnd.ends = {}, tmp_path, {}
    path = write_config(WAITED)
    assert cli.main(["--config", str(path), "try", job, "--in", "5", "--wait"]) == code
    out = capsys.readouterr()
    assert said in out.out + out.err, out


def test_try_without_in_waits_for_the_judgement_too(write_config, tmp_path, monkeypatch, capsys):
    """No --in: the default delay, and the same wait for the runner's word (it was a TypeError:
    None compared with the 60 s beyond which nothing is waited for)."""
    monkeypatch.setattr(trial, "RUNTIME_UNIT_DIR", tmp_path / "run-units")
    monkeypatch.setattr(systemctl, "Systemctl", SystemdRunsToTheEnd)
    SystemdRuns.units, SystemdRuns.directory, SystemdRunsToTheEnd.ends = {}, tmp_path, {}
    path = write_config(WAITED)
    assert cli.main(["--config", str(path), "try", "nightly"]) == 0
    assert "the runner started the job" in capsys.readouterr().out
