"""market-timers-exec-at (generator/exec_at.c): the pre-fire's wait for the instant on the
realtime clock, then the exec of the job, in place (same pid, same file descriptors).

No timing goals here (bench/alternatives.py measures it): never before the instant, a past
instant at once, the job's nice value (--nice, or the one it was started at), and every failure
named with the runner's status 172.
"""

from __future__ import annotations

import math
import os
import shutil
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
SOURCE = Path(__file__).resolve().parents[2] / "generator" / "exec_at.c"


def tree_build() -> Path:
    """The program the C tests run: this tree's exec_at.c, built with the Makefile's flags into
    build/ when a compiler is at hand (the venv's copy, which the runner-side tests name, may
    come from another checkout or an older source), else the venv's."""
    out = SOURCE.parents[1] / "build" / "test-exec-at" / prefire.EXEC_AT
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return EXEC_AT
    if not out.exists() or out.stat().st_mtime < SOURCE.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(SOURCE)],
                       check=True)
    return out


PROGRAM = tree_build()
pytestmark = pytest.mark.skipif(not os.access(PROGRAM, os.X_OK) and os.environ.get("CI") != "true",
                                reason=f"{PROGRAM} not built: run `make venv`")

STAMP = f"""#!{sys.executable}
import os, sys, time
t = time.time()
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(t, os.getpid(), os.getpriority(os.PRIO_PROCESS, 0), " ".join(sys.argv[1:]), fds,
      os.environ.get("MARKET_JOB"), flush=True)
print(os.environ.get("MARKET_EXEC_AT_WOKE"), os.environ.get("MARKET_EXEC_AT_RUSAGE"), flush=True)
"""


@pytest.fixture
def stamp(tmp_path: Path) -> Path:
    path = tmp_path / "stamp"
    path.write_text(STAMP)
    path.chmod(0o755)
    return path


def exec_at(*args: str, nice: int | None = None, **kw) -> subprocess.CompletedProcess:
    """market-timers-exec-at started at `nice` (as systemd applies the unit's Nice=)."""
    return subprocess.run([str(PROGRAM), *args], capture_output=True, text=True, timeout=20,
                          env=dict(os.environ, MARKET_JOB="signal"),
                          preexec_fn=None if nice is None else
                          (lambda: os.setpriority(os.PRIO_PROCESS, 0, nice)), **kw)


def test_the_job_is_execd_at_its_instant_never_before(stamp):
    instant = math.ceil(time.time()) + 1
    out = exec_at(str(instant), str(stamp), "a b", "c")
    assert out.returncode == 0, out.stderr
    first, _ = out.stdout.split("\n", 1)
    t, _, _, rest = (first + "\n").split(maxsplit=3)
    assert float(t) >= instant
    assert rest.startswith("a b c ")  # its arguments (one of them with a space)
    assert rest.endswith(" signal\n")  # and the environment


def test_the_job_is_told_when_the_wait_ended_and_what_the_process_had_cost(stamp):
    """MARKET_EXEC_AT_WOKE: the clock reading that ended the wait, at or past the instant and
    before the job's own; MARKET_EXEC_AT_RUSAGE: four counters that the job's own getrusage()
    (which counts the whole process, across the execs) can only have grown from."""
    instant = math.ceil(time.time()) + 1
    out = exec_at(str(instant), str(stamp))
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()[:2]
    woke, *rusage = second.split()
    assert instant <= float(woke) <= float(first.split()[0])
    assert len(rusage) == 4 and all(int(x) >= 0 for x in rusage)
    minflt, majflt, nvcsw, nivcsw = map(int, rusage)
    assert minflt > 0  # the runner's and exec-at's start faulted their pages in


def test_the_names_exec_at_exports_are_the_contracts():
    from market_timers.contracts import environment

    source = SOURCE.read_text()
    assert f'"{environment.EXEC_AT_WOKE}="' in source
    assert f'"{environment.EXEC_AT_RUSAGE}="' in source


def test_the_read_ahead_of_the_job_never_blocks_on_what_is_not_a_file(tmp_path):
    """exec-at asks for the job's file to be read into the page cache during the lead; a path
    that is a FIFO (opening it for reading would wait for a writer) is left to the exec, which
    refuses it at once, named."""
    fifo = tmp_path / "job"
    os.mkfifo(fifo, 0o755)
    out = exec_at(str(math.ceil(time.time()) + 1), str(fifo))
    assert out.returncode == RUNNER_ERROR
    assert f"cannot run {fifo}: Permission denied" in out.stderr


def test_a_past_instant_execs_at_once(stamp):
    started = time.time()
    out = exec_at(str(int(started) - 3600), str(stamp))
    assert out.returncode == 0 and float(out.stdout.split()[0]) - started < 5


LOWER = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                           reason="lowering a nice value needs root")


@LOWER
def test_nice_0_returns_the_job_from_a_wait_at_nice_minus_10(stamp):
    out = exec_at("--nice", "0", str(math.ceil(time.time()) + 1), str(stamp), nice=-10)
    assert out.returncode == 0 and out.stdout.split()[2] == "0"


@LOWER
@pytest.mark.parametrize("start", [-10, -5, 5])
def test_without_nice_the_job_keeps_the_nice_value_it_was_started_at(stamp, start):
    """A drop-in's Nice= (the runner passes no --nice then): never reset to 0."""
    out = exec_at(str(math.ceil(time.time()) + 1), str(stamp), nice=start)
    assert out.returncode == 0 and out.stdout.split()[2] == str(start)
    past = exec_at(str(int(time.time()) - 3600), str(stamp), nice=start)  # no sleep at all
    assert past.returncode == 0 and past.stdout.split()[2] == str(start)


def test_the_pid_and_an_inherited_file_descriptor_pass_through(stamp, tmp_path):
    """The runner's lock is an inherited fd: it must reach the job (it dies with the job)."""
    lock = os.open(tmp_path / "orders.lock", os.O_RDWR | os.O_CREAT)
    try:
        p = subprocess.Popen([str(PROGRAM), str(int(time.time())), str(stamp)],
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
    # beyond LLONG_MAX / 1e9: the nanoseconds overflowed into the past and the job ran at once
    (["9223372037", "/bin/true"], "not an instant in whole seconds: 9223372037"),
    (["17179869184", "/bin/true"], "not an instant in whole seconds: 17179869184"),
    (["0", "true"], "usage: market-timers-exec-at [--nice N] EPOCH /PROGRAM"),
    (["0"], "usage:"),
    (["--nice", "0", "0"], "usage:"),
    (["--nice"], "usage:"),
    (["--nice", "low", "0", "/bin/true"], "not a nice value (-20 to 19): low"),
    (["--nice", "20", "0", "/bin/true"], "not a nice value (-20 to 19): 20"),
    (["0", "/nonexistent/job"], "cannot run /nonexistent/job: No such file or directory"),
])
def test_every_failure_is_named_and_exits_172(args, words):
    out = exec_at(*args)
    assert out.returncode == RUNNER_ERROR
    assert words in out.stderr and out.stderr.startswith("market-timers-run: ")


def test_under_journald_the_line_carries_its_priority():
    out = subprocess.run([str(PROGRAM), "0", "/nonexistent/job"], capture_output=True,
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
    assert wait == [str(EXEC_AT), str(instant)] and capable is False  # at nice 0: kept
    warm = prefire.await_exec_time({"MARKET_LEAD_SEC": "10", "MARKET_WARM_SEC": "10"},
                                   datetime.fromtimestamp(instant + 9, UTC), "signal")
    assert warm == (False, [str(EXEC_AT), str(instant - 1)])  # the warm job's exec time


def test_a_start_at_the_pre_fired_units_nice_asks_exec_at_for_nice_0(monkeypatch):
    """Started at the unit's Nice=-10 and no drop-in says -10 (this test is in no job unit)."""
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "getpriority", lambda which, who: -10)
    instant = math.ceil(time.time()) + 1
    _, wait = prefire.await_exec_time({"MARKET_LEAD_SEC": "2"},
                                      datetime.fromtimestamp(instant, UTC), "signal")
    assert wait == [str(EXEC_AT), "--nice", "0", str(instant)]


def test_without_exec_at_the_runner_waits_itself(monkeypatch):
    monkeypatch.setattr(instant_escort, "has_cap_sys_nice", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(prefire, "exec_at_program", lambda: None)
    instant = math.ceil(time.time()) + 1
    capable, wait = prefire.await_exec_time({"MARKET_LEAD_SEC": "2"},
                                            datetime.fromtimestamp(instant, UTC), "signal")
    assert wait == [] and time.time() >= instant
