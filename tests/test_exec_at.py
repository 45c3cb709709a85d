"""market-timers-exec-at (generator/exec_at.c): the pre-fire's wait for the instant on the
realtime clock, then the exec of the job, in place (same pid, same file descriptors).

No timing goals here (bench/alternatives.py measures it): never before the instant, a past
instant at once, nice 0 for the job, and every failure named with the runner's status 172.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_timers.contracts.exitcodes import RUNNER_ERROR
from market_timers.runner import prefire
from market_timers.runner import realtime as instant_escort

EXEC_AT = Path(sys.executable).parent / prefire.EXEC_AT
pytestmark = pytest.mark.skipif(not os.access(EXEC_AT, os.X_OK) and os.environ.get("CI") != "true",
                                reason=f"{EXEC_AT} not built: run `make venv`")

STAMP = f"""#!{sys.executable}
import os, sys, time
t = time.time()
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(t, os.getpid(), os.getpriority(os.PRIO_PROCESS, 0), " ".join(sys.argv[1:]), fds,
      os.environ.get("MARKET_JOB"), flush=True)
"""


@pytest.fixture
def stamp(tmp_path: Path) -> Path:
    path = tmp_path / "stamp"
    path.write_text(STAMP)
    path.chmod(0o755)
    return path


def exec_at(*args: str, nice: int = 0, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXEC_AT), *args], capture_output=True, text=True, timeout=20,
                          env=dict(os.environ, MARKET_JOB="signal"),
                          preexec_fn=(lambda: os.nice(nice)) if nice else None, **kw)


def test_the_job_is_execd_at_its_instant_never_before(stamp):
    instant = math.ceil(time.time()) + 1
    out = exec_at(str(instant), str(stamp), "a b", "c")
    assert out.returncode == 0, out.stderr
    t, _, _, rest = out.stdout.split(maxsplit=3)
    assert float(t) >= instant
    assert rest.startswith("a b c ")  # its arguments (one of them with a space)
    assert rest.endswith(" signal\n")  # and the environment


def test_a_past_instant_execs_at_once(stamp):
    started = time.time()
    out = exec_at(str(int(started) - 3600), str(stamp))
    assert out.returncode == 0 and float(out.stdout.split()[0]) - started < 5


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a nice value needs root")
def test_the_job_runs_at_nice_0_after_a_wait_at_nice_minus_10(stamp):
    out = exec_at(str(math.ceil(time.time()) + 1), str(stamp), nice=-10)
    assert out.returncode == 0 and out.stdout.split()[2] == "0"


def test_the_pid_and_an_inherited_file_descriptor_pass_through(stamp, tmp_path):
    """The runner's lock is an inherited fd: it must reach the job (it dies with the job)."""
    lock = os.open(tmp_path / "orders.lock", os.O_RDWR | os.O_CREAT)
    try:
        p = subprocess.Popen([str(EXEC_AT), str(int(time.time())), str(stamp)],
                             stdout=subprocess.PIPE, text=True, pass_fds=(lock,))
        out, _ = p.communicate(timeout=20)
    finally:
        os.close(lock)
    assert int(out.split()[1]) == p.pid
    assert f"{lock}" in out.split("[", 1)[1].split("]")[0].split(", ")


@pytest.mark.parametrize("args, words", [
    (["soon", "/bin/true"], "not an instant in whole seconds: soon"),
    (["1.5", "/bin/true"], "not an instant in whole seconds: 1.5"),
    (["-5", "/bin/true"], "not an instant in whole seconds: -5"),
    (["99999999999999999999", "/bin/true"], "not an instant"),
    (["0", "true"], "usage: market-timers-exec-at EPOCH /PROGRAM"),
    (["0"], "usage:"),
    (["0", "/nonexistent/job"], "cannot run /nonexistent/job: No such file or directory"),
])
def test_every_failure_is_named_and_exits_172(args, words):
    out = exec_at(*args)
    assert out.returncode == RUNNER_ERROR
    assert words in out.stderr and out.stderr.startswith("market-timers-run: ")


def test_under_journald_the_line_carries_its_priority():
    out = subprocess.run([str(EXEC_AT), "0", "/nonexistent/job"], capture_output=True,
                         text=True, env=dict(os.environ, JOURNAL_STREAM="8:1"))
    assert out.stderr.startswith("<3>market-timers-run: cannot run /nonexistent/job")


# the runner's side ------------------------------------------------------------------------------

def test_a_pre_fired_start_hands_its_wait_to_exec_at(monkeypatch):
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    instant = math.ceil(time.time()) + 1
    when = datetime.fromtimestamp(instant, UTC)
    started = time.time()
    capable, wait = prefire.await_exec_time({"MARKET_LEAD_SEC": "2"}, when, "signal")
    assert time.time() - started < 0.5  # not waited here
    assert wait == [str(EXEC_AT), str(instant)] and capable is False
    warm = prefire.await_exec_time({"MARKET_LEAD_SEC": "10", "MARKET_WARM_SEC": "10"},
                                   datetime.fromtimestamp(instant + 9, UTC), "signal")
    assert warm == (False, [str(EXEC_AT), str(instant - 1)])  # the warm job's exec time


def test_without_exec_at_the_runner_waits_itself(monkeypatch):
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(prefire, "exec_at_program", lambda: None)
    instant = math.ceil(time.time()) + 1
    capable, wait = prefire.await_exec_time({"MARKET_LEAD_SEC": "2"},
                                            datetime.fromtimestamp(instant, UTC), "signal")
    assert wait == [] and time.time() >= instant
