"""Exit codes of `market-timers` and of the job runner.

The runner's own refusals use codes from the range LSB reserves for applications (150-199), so
that they never collide with a job's own exit status (the runner execs the job, so a job's status
passes through unchanged) nor with systemd's own 200-243. The alert layer maps them to kinds
(contracts/outcomes.py: "stale-start", "overlap-skipped", "already-ran", "requires-unmet", "paused", "halted", "clock-skew"...; 174
goes through retries.final_failure); they are documented in market-timers(1) and
market-timers-run(1).
"""

OK = 0
FAILURE = 1
USAGE = 2  # bad command line or bad config: nothing was changed
STALE_START = 170  # runner: started later than the job's grace; the job did not run
OVERLAP_SKIPPED = 171  # runner: the job's lock group was busy; the run was dropped
RUNNER_ERROR = 172  # runner: could not exec the job (missing command, bad arguments)
ALREADY_RAN = 173  # runner: this (job, session) already started (run ledger); not run again
RETRIES_OVER = 174  # runner: a restart after the last allowed attempt (retries.py); not run
LEDGER_UNREACHABLE = 175  # runner: the cluster ledger (PostgreSQL) cannot be reached; not run
REQUIRES_UNMET = 176  # runner: a job it `requires` did not succeed in this session; not run
PAUSED = 177  # runner: the job or its lock group is paused (`market-timers pause`); not run
HALTED = 178  # runner: a halt (`market-timers halt`, the kill switch) covers the job; not run
CLOCK_SKEW = 179  # runner: this node's clock disagrees with the cluster ledger's; not run
