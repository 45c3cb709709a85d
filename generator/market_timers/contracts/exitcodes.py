"""Exit codes of `market-timers` and of the job runner.

The runner's own refusals are rows of the outcome table (contracts/outcomes.py), with their codes
from the range LSB reserves for applications (150-199), so that they never collide with a job's
own exit status (the runner execs the job, so a job's status passes through unchanged) nor with
systemd's own 200-243; the names below are read from it. They are documented in
market-timers(1) and market-timers-run(1) (tests/project/test_docs.py holds the pages to the table).
"""

from market_timers.contracts.outcomes import EXIT as _EXIT

OK = 0
FAILURE = 1
USAGE = 2  # bad command line or bad config: nothing was changed
STALE_START = _EXIT["stale-start"]  # started later than the job's grace; the job did not run
OVERLAP_SKIPPED = _EXIT["overlap-skipped"]  # the job's lock group was busy; the run was dropped
RUNNER_ERROR = _EXIT["runner-error"]  # could not exec the job (missing command, bad arguments)
ALREADY_RAN = _EXIT["already-ran"]  # this (job, session) already started (run ledger)
RETRIES_OVER = _EXIT["retries-over"]  # a restart after the last allowed attempt (retry.py)
LEDGER_UNREACHABLE = _EXIT["ledger-unreachable"]  # the cluster ledger cannot be reached
REQUIRES_UNMET = _EXIT["requires-unmet"]  # a job it `requires` did not succeed in this session
PAUSED = _EXIT["paused"]  # the job or its lock group is paused (`market-timers pause`)
HALTED = _EXIT["halted"]  # a halt (`market-timers halt`, the kill switch) covers the job
CLOCK_SKEW = _EXIT["clock-skew"]  # this node's clock disagrees with the cluster ledger's


def supervised_signal(status: str) -> str | None:
    """How a command supervised by market-timers-run died, read from its exit status: the
    supervisor exits 128 + the signal for a death systemd counts as a clean end (HUP, INT, PIPE,
    TERM: runner/supervisor.py), "killed by signal 15 (TERM)"; None for any other status."""
    import signal

    if not status.strip().isdigit() or int(status) - 128 not in (1, 2, 13, 15):
        return None
    sig = signal.Signals(int(status) - 128)
    return f"killed by signal {sig.value} ({sig.name.removeprefix('SIG')})"
