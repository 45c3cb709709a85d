"""The escort of a pre-fired run (instant_escort.py): real-time priority lent to the run's main
thread around its instant, the job itself exec'd without the capability, and the units that
grant it.

No timing goals here (bench/alternatives.py measures the lateness): these check who holds which
policy when, on real processes. Raising another process to SCHED_FIFO needs CAP_SYS_NICE: the
tests that do it need root (CI runs as root).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_timers.runner import prefire
from market_timers.runner import realtime as instant_escort
from market_timers.schedule import calendar_checks, render
from market_timers.schedule.plan import plan_ahead

ROOT = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                          reason="raising another process to SCHED_FIFO needs CAP_SYS_NICE")
FIFO = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK


@pytest.fixture
def target():
    """A process standing in for the job: it sleeps, as a job in wait_for_instant() does."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield p
    p.kill()
    p.wait()


def run_escort(pid: int, born, instant: float, **kw) -> subprocess.CompletedProcess:
    """escort() in a process of its own, as the runner's fork runs it."""
    code = (f"import sys; from market_timers.runner import realtime as w; "
            f"sys.exit(w.escort({pid}, {born!r}, {instant!r}, 'signal', "
            + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + "))")
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)


def policy_at(pid: int, when: float) -> int:
    time.sleep(max(0.0, when - time.time()))
    return os.sched_getscheduler(pid)


@ROOT
def test_the_job_is_real_time_around_its_instant_and_normal_before_and_after(target):
    born = instant_escort.start_time(target.pid)
    instant = time.time() + 1.0
    escort = run_escort(target.pid, born, instant, before=0.3, hold=0.3)
    assert policy_at(target.pid, instant - 0.5) == os.SCHED_OTHER
    assert policy_at(target.pid, instant) == FIFO
    assert os.sched_getparam(target.pid).sched_priority == instant_escort.PRIORITY
    assert escort.wait(timeout=10) == 0
    assert os.sched_getscheduler(target.pid) == os.SCHED_OTHER


@ROOT
def test_the_hold_lasts_until_a_slow_exec_has_completed(tmp_path):
    """Still market-timers-exec-at when the hold ends (its exec of the job has not completed):
    real-time until it has, then the policy it had."""
    instant = time.time() + 1.0
    code = ("import time\n"
            "open('/proc/self/comm', 'w').write('market-timers-exec-at')\n"
            f"time.sleep(max(0, {instant} + 0.6 - time.time()))\n"
            "open('/proc/self/comm', 'w').write('the-job')\n"  # the exec completed
            "time.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        escort = run_escort(p.pid, instant_escort.start_time(p.pid), instant, before=0.3,
                            hold=0.1)
        assert policy_at(p.pid, instant + 0.4) == FIFO  # past the hold, before the exec
        assert escort.wait(timeout=10) == 0
        assert os.sched_getscheduler(p.pid) == os.SCHED_OTHER
        assert Path(f"/proc/{p.pid}/comm").read_text() == "the-job\n"
    finally:
        p.kill()
        p.wait()


@ROOT
def test_the_hold_of_an_exec_that_never_completes_ends_at_its_limit():
    instant = time.time() + 0.6
    code = ("import time\nopen('/proc/self/comm', 'w').write('market-timers-exec-at')\n"
            "time.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        escort = run_escort(p.pid, instant_escort.start_time(p.pid), instant, before=0.2,
                            hold=0.1, hold_max=0.3)
        assert escort.wait(timeout=10) == 0
        assert os.sched_getscheduler(p.pid) == os.SCHED_OTHER
    finally:
        p.kill()
        p.wait()


@ROOT
@pytest.mark.parametrize("policy", [os.SCHED_BATCH, os.SCHED_IDLE,
                                    os.SCHED_OTHER | os.SCHED_RESET_ON_FORK])
def test_after_the_instant_the_job_gets_back_the_policy_a_drop_in_gave_it(policy):
    """CPUSchedulingPolicy=batch|idle (or CPUSchedulingResetOnFork=yes) in a drop-in: real-time
    for the instant, then that policy again, not SCHED_OTHER."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                         preexec_fn=lambda: os.sched_setscheduler(0, policy, os.sched_param(0)))
    try:
        instant = time.time() + 0.6
        escort = run_escort(p.pid, instant_escort.start_time(p.pid), instant, before=0.3,
                            hold=0.2)
        assert policy_at(p.pid, instant) == FIFO
        assert escort.wait(timeout=10) == 0
        assert os.sched_getscheduler(p.pid) == policy
    finally:
        p.kill()
        p.wait()


@ROOT
def test_a_job_made_real_time_by_a_drop_in_is_left_alone():
    """CPUSchedulingPolicy=rr, CPUSchedulingPriority=20 in a drop-in: never lowered to FIFO 1,
    never put back to SCHED_OTHER."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                         preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_RR,
                                                                  os.sched_param(20)))
    try:
        instant = time.time() + 0.5
        escort = run_escort(p.pid, instant_escort.start_time(p.pid), instant, before=0.3,
                            hold=0.1)
        assert policy_at(p.pid, instant) == os.SCHED_RR
        assert escort.wait(timeout=10) == 0
        assert os.sched_getscheduler(p.pid) == os.SCHED_RR
        assert os.sched_getparam(p.pid).sched_priority == 20
    finally:
        p.kill()
        p.wait()


def test_a_job_that_has_ended_is_left_alone(target):
    born = instant_escort.start_time(target.pid)
    target.kill()
    target.wait()
    escort = run_escort(target.pid, born, time.time() + 0.2)
    assert escort.wait(timeout=10) == 0
    assert escort.stderr.read() == ""


@ROOT
def test_a_pid_reused_by_another_process_is_never_touched(target):
    """The pid names the job together with its start time: another process that got the pid
    (the job ended, the pid was reused) keeps its policy."""
    escort = run_escort(target.pid, "1", time.time() + 0.2)  # not target's start time
    assert escort.wait(timeout=10) == 0
    assert os.sched_getscheduler(target.pid) == os.SCHED_OTHER


def test_without_the_capability_the_escort_says_so_and_the_job_runs_on(target):
    """An escort that cannot raise the job (no CAP_SYS_NICE: here, an escort that dropped it
    first) writes one warning to the journal and leaves the job as it was."""
    born = instant_escort.start_time(target.pid)
    code = ("import sys; from market_timers.runner import realtime as w; w.drop_capabilities('the test'); "
            f"sys.exit(w.escort({target.pid}, {born!r}, {time.time() + 0.2!r}, 'signal'))")
    escort = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=10)
    assert escort.returncode == 1
    assert "cannot lend real-time priority to signal for its instant (Operation not " \
           "permitted)" in escort.stderr
    assert target.poll() is None and os.sched_getscheduler(target.pid) == os.SCHED_OTHER


def caps(pid: int | str = "self") -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v, 16) for k, v in (line.split(":\t") for line in f)
                if k.startswith("Cap")}


def test_drop_capabilities_empties_every_set_so_the_job_holds_none():
    code = ("from market_timers.runner import realtime as w; w.drop_capabilities('the test'); "
            "print(open('/proc/self/status').read())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    got = {k: int(v, 16) for k, v in (line.split(":\t") for line in out.splitlines()
                                        if line.startswith("Cap"))}
    assert got["CapEff"] == got["CapPrm"] == got["CapInh"] == got["CapAmb"] == 0


def test_a_failed_drop_is_logged_and_the_run_goes_on(monkeypatch, capsys):
    monkeypatch.setattr(instant_escort, "_libc", type("Libc", (), {"capset": lambda *a: -1})())
    instant_escort.drop_capabilities("the exec of /opt/job")
    assert "cannot drop CAP_SYS_NICE before the exec of /opt/job" in capsys.readouterr().err


@ROOT
def test_has_cap_sys_nice_reads_the_effective_set(tmp_path):
    assert instant_escort.has_cap_sys_nice()  # root
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t0000000000800000\n")  # bit 23 only
    assert instant_escort.has_cap_sys_nice(str(status))
    status.write_text("Name:\tx\nCapEff:\t000001fffe7fffff\n")  # all but bit 23
    assert not instant_escort.has_cap_sys_nice(str(status))
    assert not instant_escort.has_cap_sys_nice(str(tmp_path / "missing"))


# the runner's side ------------------------------------------------------------------------------

JOB = f"""#!{sys.executable}
import os, sys, time
from market_timers.jobnotify import wait_for_instant
acted = time.time()
at = os.sched_getscheduler(0)
caps = dict(line.split(":\\t") for line in open("/proc/self/status").read().splitlines()
            if line.startswith("Cap"))
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    own = "fifo"
except OSError as e:
    own = e.strerror.replace(" ", "-")
if os.environ.get("MARKET_WARM_SEC"):
    wait_for_instant()
    acted = time.time()
    at = os.sched_getscheduler(0)
time.sleep(0.5)
print(int(caps["CapEff"], 16), int(caps["CapPrm"], 16), int(caps["CapAmb"], 16), own, at,
      os.sched_getscheduler(0), acted)
"""


@pytest.fixture
def shared_dir():
    """A directory user nobody can use (pytest's tmp_path is root's own, mode 0700)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="mt-escort-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def as_unit_user(shared_dir: Path, env: dict, instant: int) -> list[str]:
    """The runner (market-timers-run -- JOB), started as user nobody holding CAP_SYS_NICE as
    an ambient capability: what a pre-fired unit's User= and AmbientCapabilities= give."""
    job = shared_dir / "job.py"
    job.write_text(JOB)
    job.chmod(0o755)
    scheduled = datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    full = dict(os.environ, MARKET_JOB="signal", MARKET_SESSION="2025-11-26",
                MARKET_SCHEDULED_UTC=scheduled, MARKET_GRACE_SEC="60",
                MARKET_STATE_DIR=str(shared_dir / "state"),
                MARKET_LOCK_DIR=str(shared_dir / "run"),
                PYTHONPATH=str(Path(instant_escort.__file__).parents[2]), **env)
    full.pop("JOURNAL_STREAM", None)
    out = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         "--inh-caps=+sys_nice", "--ambient-caps=+sys_nice",
         sys.executable, "-m", "market_timers.run", "--", str(job)],
        capture_output=True, text=True, timeout=20, env=full)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return out.stdout.split()


@ROOT
@pytest.mark.parametrize("warm", [False, True], ids=["exec at the instant", "warm job"])
def test_the_job_is_execd_without_capabilities_yet_real_time_at_its_instant(shared_dir, warm):
    """The job (same pid as the runner) has no capability left and cannot make itself
    real-time, yet at its instant (its first line, or a warm job's return from
    wait_for_instant()) it is SCHED_FIFO, and back to normal after the hold."""
    instant = int(time.time()) + 2
    env = {"MARKET_LEAD_SEC": "2", **({"MARKET_WARM_SEC": "2"} if warm else {})}
    eff, prm, amb, own, at, after, acted = as_unit_user(shared_dir, env, instant)
    assert (int(eff), int(prm), int(amb)) == (0, 0, 0)
    assert own == "Operation-not-permitted"
    assert int(at) == FIFO
    assert int(after) == os.SCHED_OTHER
    assert float(acted) >= instant


def test_a_pre_fired_start_without_the_capability_is_told_and_runs_on(capsys, monkeypatch):
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)
    monkeypatch.setattr(instant_escort, "start", lambda *a: pytest.fail("no escort without it"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(prefire, "exec_at_program", lambda: None)  # the wait done here
    instant = datetime.fromtimestamp(time.time() + 0.3, UTC)
    prefire.await_exec_time({"MARKET_LEAD_SEC": "2"}, instant, "signal")
    assert time.time() >= instant.timestamp()
    assert "no CAP_SYS_NICE for this pre-fired start of signal" in capsys.readouterr().err


def test_without_a_lead_nothing_is_escorted_nor_dropped(monkeypatch):
    monkeypatch.setattr(instant_escort, "start", lambda *a: pytest.fail("not pre-fired"))
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: True)
    assert prefire.await_exec_time({}, datetime.now(UTC), "signal") == (False, [])
    assert prefire.await_exec_time({"MARKET_LEAD_SEC": "0"}, datetime.now(UTC), "signal") \
        == (False, [])


def test_a_start_by_hand_long_before_is_not_escorted_but_still_drops(monkeypatch):
    """No wait, no escort; the runner is still told to drop the capability before the exec."""
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: True)
    monkeypatch.setattr(instant_escort, "start", lambda *a: pytest.fail("no wait, no escort"))
    later = datetime.fromtimestamp(time.time() + 3600, UTC)
    assert prefire.await_exec_time({"MARKET_LEAD_SEC": "2"}, later, "signal") == (True, [])
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)
    assert prefire.await_exec_time({"MARKET_LEAD_SEC": "2"}, later, "signal") == (False, [])


def test_exec_job_drops_the_capabilities_only_when_told(monkeypatch):
    from market_timers.runner import start as runbase

    dropped = []
    monkeypatch.setattr(instant_escort, "drop_capabilities", dropped.append)
    monkeypatch.setattr(os, "execve", lambda *a: (_ for _ in ()).throw(OSError(2, "gone")))
    claim = type("Claim", (), {"attempt": 1, "fence": None})()
    runbase.exec_job(["/nonexistent"], {}, "2025-11-26", "2025-11-26T20:45:00Z", claim)
    assert dropped == []
    runbase.exec_job(["/nonexistent"], {}, "2025-11-26", "2025-11-26T20:45:00Z", claim,
                     drop_capabilities=True)
    assert dropped == ["the exec of /nonexistent"]


def test_no_escort_once_the_instant_and_its_hold_are_past(monkeypatch):
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    assert not instant_escort.start(time.time() - 1, "signal")


# the units ---------------------------------------------------------------------------------------

CONFIG = """
calendar = "XNYS"
horizon = 1
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
{keys}
"""
WED = datetime(2025, 11, 26, 12, 0, tzinfo=UTC)


def service(write_config, keys: str) -> list[str]:
    cfg = calendar_checks.load(write_config(CONFIG.format(keys=keys)))
    units = render.render_all(cfg, plan_ahead(cfg, WED), "/r")
    return next(u.text for u in units if u.name.endswith(".service")).splitlines()


def test_only_a_pre_fired_jobs_unit_grants_cap_sys_nice_and_real_time(write_config):
    for keys in ("", 'warm = "10s"', 'lead = "30s"'):
        unit = service(write_config, keys)
        assert "AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_SYS_NICE" in unit
        assert "RestrictRealtime=no" in unit and "RestrictRealtime=yes" not in unit
    plain = service(write_config, 'lead = "0s"')
    # only what the runner needs to start the job as its own user (jobuser.py)
    assert [line for line in plain if line.startswith("AmbientCapabilities=")] == \
        ["AmbientCapabilities=CAP_SETUID CAP_SETGID"]
    assert "RestrictRealtime=yes" in plain
    # nothing else is relaxed for it
    lead = service(write_config, "")
    assert [x for x in lead if x not in plain and not x.startswith(("#", "Environment=",
                                                                    "Nice=", "RuntimeMaxSec="))] \
        == ["CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_SYS_NICE",
            "AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_SYS_NICE", "RestrictRealtime=no"]
    assert [x for x in plain if x not in lead and not x.startswith(("Environment=",
                                                                    "RuntimeMaxSec="))] \
        == ["CapabilityBoundingSet=CAP_SETUID CAP_SETGID",
            "AmbientCapabilities=CAP_SETUID CAP_SETGID", "RestrictRealtime=yes"]


def test_a_periodic_jobs_unit_grants_nothing(write_config):
    cfg = calendar_checks.load(write_config(CONFIG.format(keys="").replace(
        'event = "close"\noffset = "-15min"',
        'every = "5min"\nfrom = "open+5min"\nuntil = "close-10min"')))
    for u in render.render_all(cfg, plan_ahead(cfg, WED), "/r"):
        if u.name.endswith(".service"):
            assert "AmbientCapabilities=CAP_SETUID CAP_SETGID\n" in u.text  # to switch users
            assert "CAP_SYS_NICE" not in u.text and "RestrictRealtime=yes" in u.text


def test_warm_on_a_periodic_job_is_refused_naming_the_key(write_config, capsys):
    from market_timers import cli

    path = write_config(CONFIG.format(keys='warm = "10s"').replace(
        'event = "close"\noffset = "-15min"',
        'every = "5min"\nfrom = "open+5min"\nuntil = "close-10min"'))
    assert cli.main(["--config", str(path), "plan"]) != 0
    err = capsys.readouterr().err
    assert "job.signal.warm" in err and "periodic" in err and "10s" in err


@ROOT
def test_the_record_step_drops_the_capability_too(shared_dir):
    """ExecStopPost= (`market-timers-run --record`) runs under the same unit, so it starts with
    the ambient CAP_SYS_NICE too; it has no use for it and drops it before its work."""
    probe = ("import os; from market_timers.runner import record as runend; "
             "runend.record({'MARKET_JOB': 'signal', 'MARKET_LEAD_SEC': '2', "
             f"'MARKET_STATE_DIR': {str(shared_dir / 'state')!r}, "
             "'MARKET_SCHEDULED_UTC': '2025-11-26T20:45:00Z'}); "
             "print(open('/proc/self/status').read())")
    out = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         "--inh-caps=+sys_nice", "--ambient-caps=+sys_nice", sys.executable, "-c", probe],
        capture_output=True, text=True, timeout=20,
        env=dict(os.environ, PYTHONPATH=str(Path(instant_escort.__file__).parents[2])))
    assert out.returncode == 0, out.stderr
    got = {k: int(v, 16) for k, v in (line.split(":\t") for line in out.stdout.splitlines()
                                        if line.startswith("Cap"))}
    assert got["CapEff"] == got["CapPrm"] == got["CapAmb"] == 0
