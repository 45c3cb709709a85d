"""Pre-fire (`lead`) and warm jobs (`warm`): the timer fires early, the runner does everything,
then waits for the exact instant on the realtime clock and execs the job (issue 15, section 1).

No timing assertions here (bench/alternatives.py measures how close to the instant): these check
what must hold whatever the machine's speed: never before the instant, the grace judged against
the real instant, the record written first, the unit names unchanged.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_timers import cli, jobnotify, runner
from market_timers.config import loader as config
from market_timers.runner import instant_wait, prefire
from market_timers.runner import realtime as instant_escort
from market_timers.schedule import calendar_checks, render, sync
from market_timers.schedule.plan import plan_ahead

WED = datetime(2025, 11, 26, 12, 0, tzinfo=UTC)
SIGNAL = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
{keys}
"""


def units(write_config, keys: str = "", now: datetime = WED) -> dict[str, str]:
    cfg = calendar_checks.load(write_config(SIGNAL.format(keys=keys)))
    return {u.name: u.text for u in render.render_all(cfg, plan_ahead(cfg, now), "/r")}


def key(text: str, name: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(name + "=")]


def test_by_default_the_timer_fires_2s_early_and_the_name_keeps_the_instant(write_config):
    u = units(write_config)
    timer = u["market-signal@2025-11-26-204500.timer"]
    service = u["market-signal@2025-11-26-204500.service"]
    assert key(timer, "OnCalendar") == ["2025-11-26 20:44:58 UTC"]
    assert "MARKET_SCHEDULED_UTC=2025-11-26T20:45:00Z" in key(service, "Environment")
    assert "MARKET_LEAD_SEC=2" in key(service, "Environment")
    assert not any(e.startswith("MARKET_WARM_SEC") for e in key(service, "Environment"))


def test_a_pre_fired_unit_waits_at_a_higher_priority(write_config):
    assert key(units(write_config)["market-signal@2025-11-26-204500.service"], "Nice") == ["-10"]
    assert key(units(write_config, 'lead = "0s"')["market-signal@2025-11-26-204500.service"],
               "Nice") == []


def test_lead_0s_opts_out(write_config):
    u = units(write_config, 'lead = "0s"')
    assert key(u["market-signal@2025-11-26-204500.timer"], "OnCalendar") == \
        ["2025-11-26 20:45:00 UTC"]
    service = u["market-signal@2025-11-26-204500.service"]
    assert not any(e.startswith("MARKET_LEAD_SEC") for e in key(service, "Environment"))
    assert key(service, "RuntimeMaxSec") == ["1800s"]


def test_a_warm_job_fires_as_early_as_its_warm_up(write_config):
    u = units(write_config, 'warm = "10s"')
    assert key(u["market-signal@2025-11-26-204500.timer"], "OnCalendar") == \
        ["2025-11-26 20:44:50 UTC"]
    env = key(u["market-signal@2025-11-26-204500.service"], "Environment")
    assert "MARKET_LEAD_SEC=10" in env and "MARKET_WARM_SEC=10" in env


def test_a_daily_job_just_after_midnight_fires_the_evening_before(write_config):
    path = write_config('[[job]]\nname = "nightly"\nat = "00:00:01 UTC"\n'
                        'command = ["/usr/bin/true"]\nlead = "3s"\n')
    cfg = config.load(path)
    u = {x.name: x.text for x in render.render_all(cfg, plan_ahead(cfg, WED), "/r")}
    assert key(u["market-nightly@daily.timer"], "OnCalendar") == ["*-*-* 23:59:58 UTC"]


@pytest.mark.parametrize("text, words", [
    ('lead = "-2s"', "no sign"),
    ('lead = "11min"', "at most 10min"),
    ('warm = "2"', "cannot parse"),
])
def test_bad_lead_or_warm_is_refused_naming_the_key(write_config, capsys, text, words):
    path = write_config(SIGNAL.format(keys=text))
    assert cli.main(["--config", str(path), "plan"]) == 2
    err = capsys.readouterr().err
    name = text.split()[0]
    assert f"job.signal.{name}:" in err and words in err, err


class Quiet:
    def show(self, units, props):
        return {}

    def start(self, units):
        pass

    stop = reset_failed = start

    def daemon_reload(self):
        pass


def test_sync_does_not_write_a_timer_whose_early_fire_is_already_too_close(write_config):
    """A fire 3 s ahead with a 2 s lead would be a timer 1 s ahead: it could pass before systemd
    starts it, and then it would never fire. It is left to the deadman."""
    cfg = config.load(write_config(SIGNAL.format(keys="")))
    now = datetime(2025, 11, 26, 20, 44, 57, tzinfo=UTC)  # the instant 20:45:00 is 3 s ahead
    result = sync.sync(cfg, now=now, dry_run=True, systemctl=Quiet())
    assert "market-signal@2025-11-26-204500.timer" not in result.written
    assert "market-signal@2025-11-28-174500.timer" in result.written  # after Thanksgiving


# the runner --------------------------------------------------------------------------------------

STAMP = f"""#!{sys.executable}
import time, os
print(time.time(), os.environ["MARKET_SCHEDULED_UTC"], os.getpriority(os.PRIO_PROCESS, 0),
      flush=True)
"""


def run_runner(tmp_path: Path, scheduled: float, nice: int | None = None, python: str = sys.executable,
               **env) -> tuple[float, dict]:
    """Start the runner now for `scheduled` at `nice` (as systemd applies the unit's Nice=, or a
    drop-in's); the job prints its first time.time() and its nice value."""
    job = tmp_path / "stamp"
    job.write_text(STAMP)
    job.chmod(0o755)
    instant = datetime.fromtimestamp(scheduled, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    full = dict(os.environ, MARKET_JOB="signal", MARKET_SESSION="2025-11-26",
                MARKET_SCHEDULED_UTC=instant, MARKET_GRACE_SEC="60",
                MARKET_STATE_DIR=str(tmp_path / "state"), MARKET_LOCK_DIR=str(tmp_path / "run"),
                **env)
    full.pop("JOURNAL_STREAM", None)
    if python != sys.executable:  # a python without market-timers-exec-at beside it
        full["PYTHONPATH"] = str(Path(runner.__file__).parents[2])
    out = subprocess.run([python, "-m", "market_timers.run", "--", str(job)],
                         env=full, capture_output=True, text=True, check=True,
                         preexec_fn=None if nice is None else
                         (lambda: os.setpriority(os.PRIO_PROCESS, 0, nice))).stdout
    from market_timers.ledger import runrecord

    record = runrecord.read(tmp_path / "state", "signal", "2025-11-26")
    record["job_nice"] = int(out.split()[2])
    return float(out.split()[0]), record


@pytest.fixture(params=["market-timers-exec-at", "the runner"])
def waiter(request, tmp_path: Path) -> str:
    """The python that runs the runner: the venv's (market-timers-exec-at waits, as installed),
    or the same python linked from a directory without that program (the runner waits)."""
    if request.param == "market-timers-exec-at":
        if prefire.exec_at_program() is None:
            pytest.skip("market-timers-exec-at not built: run `make venv`")
        return sys.executable
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / "python3").symlink_to(os.path.realpath(sys.executable))
    return str(bare / "python3")


def test_a_pre_fired_runner_execs_the_job_at_its_instant_never_before(tmp_path):
    instant = math.ceil(time.time()) + 1  # the runner starts between 1 and 2 s early
    stamp, record = run_runner(tmp_path, instant, MARKET_LEAD_SEC="2")
    assert stamp >= instant
    assert record["late_sec"] < 0  # written before the wait: it started early, not stale
    assert record["scheduled_utc"] == datetime.fromtimestamp(instant, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


LOWER = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                           reason="lowering a nice value needs root")


@LOWER
def test_the_job_itself_runs_at_nice_0_after_a_pre_fired_wait_at_nice_minus_10(tmp_path, waiter):
    instant = math.ceil(time.time()) + 1
    stamp, record = run_runner(tmp_path, instant, nice=-10, python=waiter, MARKET_LEAD_SEC="2")
    assert stamp >= instant and record["job_nice"] == 0


@LOWER
@pytest.mark.parametrize("dropin", [-5, -15, 5])
def test_a_drop_ins_nice_is_the_jobs_after_a_pre_fired_wait(tmp_path, waiter, dropin):
    """A drop-in's Nice= replaces the pre-fired unit's Nice=-10 (drop-ins are read after the
    unit file), so the runner starts at it: the job runs at it, never reset to 0."""
    instant = math.ceil(time.time()) + 1
    stamp, record = run_runner(tmp_path, instant, nice=dropin, python=waiter,
                               MARKET_LEAD_SEC="2")
    assert stamp >= instant and record["job_nice"] == dropin


@LOWER
@pytest.mark.parametrize("dropin", [-5, 5])
def test_a_drop_ins_nice_is_the_jobs_for_a_start_by_hand_and_without_a_lead(tmp_path, dropin):
    _, by_hand = run_runner(tmp_path, math.ceil(time.time()) + 3600, nice=dropin,
                            MARKET_LEAD_SEC="2")
    assert by_hand["job_nice"] == dropin
    (tmp_path / "no-lead").mkdir()
    _, no_lead = run_runner(tmp_path / "no-lead", math.ceil(time.time()) + 1, nice=dropin)
    assert no_lead["job_nice"] == dropin


def test_a_warm_job_is_execd_its_warm_up_early_and_waits_itself(tmp_path):
    instant = math.ceil(time.time()) + 1
    stamp, _ = run_runner(tmp_path, instant, MARKET_LEAD_SEC="2", MARKET_WARM_SEC="2")
    assert stamp < instant  # exec'd early: the job waits with wait_for_instant()


def test_a_start_by_hand_long_before_the_instant_runs_at_once(tmp_path):
    instant = math.ceil(time.time()) + 3600
    stamp, _ = run_runner(tmp_path, instant, MARKET_LEAD_SEC="2")
    assert stamp < instant - 3000


def test_without_a_lead_nothing_waits(tmp_path):
    instant = math.ceil(time.time()) + 2
    stamp, _ = run_runner(tmp_path, instant)
    assert stamp < instant


def test_a_daily_job_started_by_its_early_timer_runs_for_today_not_yesterday():
    """02:29:58 for 02:30:00: without the lead in the reckoning this is yesterday's run, 24 h
    late, and refused as a stale start."""
    now = datetime(2025, 11, 26, 2, 29, 58, 300000, tzinfo=UTC)
    env = {"MARKET_DAILY_UTC": "02:30:00", "MARKET_LEAD_SEC": "2"}
    assert runner.scheduled_instant(env, now) == datetime(2025, 11, 26, 2, 30, tzinfo=UTC)
    del env["MARKET_LEAD_SEC"]
    assert runner.scheduled_instant(env, now - timedelta(seconds=10)) == \
        datetime(2025, 11, 25, 2, 30, tzinfo=UTC)


# waiting -----------------------------------------------------------------------------------------

def _fake_clock(monkeypatch, start: float, step_back_at: int | None = None):
    """time.time()/time.sleep() on a fake clock: each read advances it 10 us (a spin makes
    progress), each sleep by its length; optionally NTP steps it back 5 s on the Nth sleep."""
    clock = {"t": start}
    sleeps = []

    def fake_time():
        clock["t"] += 1e-5
        return clock["t"]

    def fake_sleep(s):
        sleeps.append(s)
        clock["t"] += s
        if len(sleeps) == step_back_at:
            clock["t"] -= 5.0

    monkeypatch.setattr(instant_wait.time, "time", fake_time)
    monkeypatch.setattr(instant_wait.time, "sleep", fake_sleep)
    return clock, sleeps


def test_sleep_until_follows_a_step_of_the_realtime_clock(monkeypatch):
    """Each step is computed afresh from time.time(): a clock stepped back mid-wait is waited
    out, a clock stepped forward ends the wait, and no step is longer than MAX_STEP."""
    clock, sleeps = _fake_clock(monkeypatch, 100.0, step_back_at=2)
    late = instant_wait.sleep_until(101.0)
    assert clock["t"] >= 101.0 and late == pytest.approx(clock["t"] - 101.0, abs=2e-5)
    assert sum(sleeps) == pytest.approx(6.0 - instant_wait.SPIN, abs=1e-3)
    assert max(sleeps) <= instant_wait.MAX_STEP


def test_sleep_until_spins_the_last_stretch_instead_of_sleeping(monkeypatch):
    """The wake-up of a sleeping thread can come milliseconds late (an idle CPU, a VM's vCPU
    halted): the last SPIN seconds are spun on the clock, never slept, and the wait never ends
    before the deadline."""
    clock, sleeps = _fake_clock(monkeypatch, 100.0)
    instant_wait.sleep_until(100.5)
    assert clock["t"] >= 100.5
    assert all(100.0 + sum(sleeps[:i + 1]) <= 100.5 - instant_wait.SPIN + 1e-3
               for i in range(len(sleeps)))
    clock, sleeps = _fake_clock(monkeypatch, 100.5 - instant_wait.SPIN / 2)
    instant_wait.sleep_until(100.5)  # already inside the last stretch: no sleep at all
    assert sleeps == [] and clock["t"] >= 100.5


def test_spin_0_sleeps_all_the_way_to_the_deadline(monkeypatch):
    """The escort's waits (instant_escort.py): sleeps only, never a spin, never early."""
    clock, sleeps = _fake_clock(monkeypatch, 100.0)
    instant_wait.sleep_until(100.5, spin=0)
    assert clock["t"] >= 100.5
    assert sum(sleeps) == pytest.approx(0.5, abs=1e-3) and max(sleeps) <= instant_wait.MAX_STEP


def test_a_clock_stepped_back_during_the_spin_is_slept_out_not_spun(monkeypatch):
    """NTP steps the clock back 5 s in the last milliseconds: those 5 s are slept (one CPU is
    not spun for them), and the wait still ends at the deadline, not before."""
    clock, sleeps = _fake_clock(monkeypatch, 100.0)
    reads = {"n": 0, "stepped": False}
    real = instant_wait.time.time

    def stepping():
        t = real()
        if not reads["stepped"] and t > 100.5 - instant_wait.SPIN / 2:
            reads["stepped"] = True
            clock["t"] -= 5.0
        reads["n"] += 1
        return clock["t"]

    monkeypatch.setattr(instant_wait.time, "time", stepping)
    instant_wait.sleep_until(100.5)
    assert reads["stepped"] and clock["t"] >= 100.5
    assert sum(sleeps) > 4.9 and reads["n"] < 10_000  # slept, not spun


def test_the_runner_sets_the_jobs_nice_value_as_its_sleep_ends_not_at_the_instant(monkeypatch):
    """Lowering a running task's priority forces a reschedule: done at the instant it handed
    the CPU to other units starting then. It is done as the sleep ends, before the spin."""
    clock, sleeps = _fake_clock(monkeypatch, 100.0)
    seen = []
    from market_timers.runner import nice  # prefire imports it for a pre-fired wait only

    monkeypatch.setattr(nice, "job_nice", lambda env: 0)  # started at the unit's -10
    monkeypatch.setattr(nice, "set_nice", lambda value: seen.append((value, clock["t"])))
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)  # no real escort
    monkeypatch.setattr(prefire, "exec_at_program", lambda: None)  # the wait done here
    prefire.await_exec_time({"MARKET_LEAD_SEC": "2"},
                           datetime.fromtimestamp(101.0, UTC))
    assert seen and seen[0][0] == 0 and seen[0][1] <= 101.0 - instant_wait.SPIN + 1e-3
    assert clock["t"] >= 101.0


def test_wait_for_instant(monkeypatch):
    monkeypatch.delenv("MARKET_SCHEDULED_UTC", raising=False)
    assert jobnotify.wait_for_instant() is None  # run by hand: nothing to wait for
    monkeypatch.setenv("MARKET_SCHEDULED_UTC", "2025-11-26T20:45:00Z")
    assert jobnotify.wait_for_instant() > 0  # past: returns at once with its lateness
    ahead = math.ceil(time.time()) + 1
    monkeypatch.setenv("MARKET_SCHEDULED_UTC",
                       datetime.fromtimestamp(ahead, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    jobnotify.wait_for_instant()
    assert time.time() >= ahead
