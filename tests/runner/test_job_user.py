"""The job's own user (issue 29): the runner, as the package's user, claims and locks, then starts
the job as MARKET_JOB_USER in a child it supervises. The job holds no capability and none of the
runner's descriptors; its exit status, or its death by a signal, is the unit's."""

from __future__ import annotations

import grp
import os
import pwd
import signal
import subprocess

import pytest
from tests.runner.test_runner import RUNNER, context, record, run

from market_timers.contracts import exitcodes

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
NOBODY = pwd.getpwnam("nobody")

PROBE = ("id -u; id -G; ls /proc/self/fd | tr '\\n' ' '; echo; "
         "grep -E '^(Cap(Inh|Prm|Eff|Amb)|Uid)' /proc/self/status; echo ppid=$PPID")


@root_only
def test_the_job_runs_as_its_user_with_no_capability_and_no_descriptor_of_the_runner(tmp_path):
    proc = run(context(tmp_path, MARKET_JOB_USER="nobody"), "/bin/sh", "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(NOBODY.pw_uid)
    assert str(os.getgid()) not in lines[1].split()  # not the package's group: its state
    assert lines[2].split() == ["0", "1", "2", "3"]  # 3: ls's own directory fd; no lock, no socket
    caps = dict(line.split(":\t") for line in lines[3:] if line.startswith("Cap"))
    assert set(caps.values()) == {"0000000000000000"}, caps
    uids = next(line for line in lines if line.startswith("Uid:")).split()[1:]
    assert uids == [str(NOBODY.pw_uid)] * 4  # real, effective, saved, fs: no way back
    assert record(tmp_path)["started_utc"]  # claimed by the runner, as before


@root_only
def test_the_supervisor_holds_the_lock_while_the_job_runs(tmp_path):
    env = context(tmp_path, MARKET_JOB_USER="nobody")
    holder = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", "echo go; sleep 10"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "go"
        other = run(context(tmp_path, MARKET_JOB="closing-orders"), "/bin/true")
        assert other.returncode == exitcodes.OVERLAP_SKIPPED
        assert f"held by pid {holder.pid} (job signal session 2025-11-28)" in other.stderr
    finally:
        holder.kill()
        holder.wait()


@root_only
def test_the_jobs_exit_status_and_its_death_by_a_signal_pass_through(tmp_path):
    """A death by SIGTERM, SIGINT, SIGHUP or SIGPIPE would be a success in systemd's eyes."""
    assert run(context(tmp_path, MARKET_JOB_USER="nobody"), "/bin/sh", "-c",
               "exit 3").returncode == 3
    killed = run(context(tmp_path, MARKET_JOB_USER="nobody", MARKET_SESSION="2025-11-29"),
                 "/bin/sh", "-c", "kill -KILL $$")
    assert killed.returncode == -signal.SIGKILL  # the runner died of it, as the job did
    # ...but not of a signal systemd counts as a clean end: 128 + its number, a failure
    termed = run(context(tmp_path, MARKET_JOB_USER="nobody", MARKET_SESSION="2025-11-30"),
                 "/bin/sh", "-c", "kill -TERM $$")
    assert termed.returncode == 128 + signal.SIGTERM
    assert "the job was killed by signal TERM; the runner exits 143" in termed.stderr


@root_only
def test_a_stop_signal_to_the_runner_reaches_the_job(tmp_path):
    env = context(tmp_path, MARKET_JOB_USER="nobody")
    proc = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c",
                             "trap 'echo term; exit 7' TERM; echo go; "
                             "while :; do sleep 0.1; done"], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "go"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 7
    assert proc.stdout.read().strip() == "term"


@pytest.mark.parametrize("user, why", [
    ("no-such-user-xyz", "does not exist"),
    ("root", "owns the scheduler's state"),
])
def test_a_job_user_that_cannot_be_is_refused_before_the_claim(tmp_path, user, why):
    proc = run(context(tmp_path, MARKET_JOB_USER=user), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert why in proc.stderr and "did not run" in proc.stderr
    assert record(tmp_path) is None  # not claimed: the session can still run


def test_a_job_user_among_the_operators_is_refused_before_the_claim(tmp_path):
    """Issue 41: a job whose user, primary or supplementary group, is the operator_group could
    lift its own halt. nobody's primary group is nogroup on Debian."""
    proc = run(context(tmp_path, MARKET_JOB_USER="nobody", MARKET_OPERATOR_GROUP="nogroup"),
               "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR, proc.stderr
    assert "operator_group nogroup" in proc.stderr and "did not run" in proc.stderr
    assert record(tmp_path) is None  # not claimed: the session can still run


@root_only
def test_the_job_gets_the_spool_group_and_none_of_the_runners(monkeypatch):
    """Issue 41 item 3: a job spools events through the spool's own group (the runner adds it),
    never through the package's group, which reads the scheduler's state. Here `daemon` stands
    for market-timers-spool, which this machine lacks."""
    from market_timers.contracts import environment
    from market_timers.runner import jobuser

    monkeypatch.setattr(environment, "SPOOL_GROUP", "daemon")
    user = jobuser.resolve({environment.JOB_USER: "nobody"})
    assert user.groups == sorted({NOBODY.pw_gid, grp.getgrnam("daemon").gr_gid})
    assert os.getgid() not in user.groups


@root_only
def test_without_a_spool_group_the_job_gets_only_its_own_groups(monkeypatch):
    from market_timers.contracts import environment
    from market_timers.runner import jobuser

    monkeypatch.setattr(environment, "SPOOL_GROUP", "no-such-spool-group")
    assert jobuser.resolve({environment.JOB_USER: "nobody"}).groups == [NOBODY.pw_gid]
