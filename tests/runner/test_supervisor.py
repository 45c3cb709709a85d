"""`market-timers-run --supervise -- COMMAND`: the main process of on_halt's unit (issue 45). It
runs COMMAND in place and ends as COMMAND ended, except that a death by a signal systemd counts as
a clean end (TERM, INT, HUP, PIPE) is the exit status 128 + the signal: an on_halt killed after
`halt`'s wait, or stopped, fails its unit and so is alerted by its OnFailure= handler."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

RUN = [sys.executable, "-m", "market_timers.run", "--supervise", "--"]


def supervise(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RUN, *command], capture_output=True, text=True, timeout=30)


def test_the_commands_exit_status_passes_through():
    assert supervise("/bin/sh", "-c", "exit 0").returncode == 0
    assert supervise("/bin/sh", "-c", "exit 3").returncode == 3


def test_a_command_killed_by_sigterm_is_a_failure_that_names_the_signal():
    termed = supervise("/bin/sh", "-c", "kill -TERM $$")
    assert termed.returncode == 128 + signal.SIGTERM
    assert "killed by signal TERM" in termed.stderr


def test_a_stop_of_the_supervisor_reaches_the_command_and_fails():
    """`systemctl stop` or `systemctl kill` of on_halt's unit: the supervisor gets the signal
    too, passes it on, and exits 143 once the command is gone."""
    proc = subprocess.Popen([*RUN, "/bin/sh", "-c", "echo go; exec sleep 30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "go"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 10  # the command was ended, not waited for
        assert "(the unit was stopped)" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_a_command_that_cannot_be_executed_is_systemds_exec_failure():
    missing = supervise("/nonexistent/cancel-all")
    assert missing.returncode == 203
    assert "cannot start /nonexistent/cancel-all" in missing.stderr


def test_no_command_is_a_usage_error():
    assert subprocess.run(RUN[:-1], capture_output=True, text=True).returncode == 2
