"""`market-timers-run`: the entry point of every job unit's ExecStart= and ExecStopPost=, and of
on_halt's unit (`--supervise`).

A start (`market-timers-run -- COMMAND`) is the runner's alone (runner/, import-light: this module
imports nothing at the top, so a start loads what it loaded before). The record step
(`--record`, after the job) composes two flows, as the command layer (cli/) composes them for
`market-timers`: the runner records how the run ended, then the metrics are updated. It sits at
the package's root, beside the package's face, so that a start loads no package of the command
line.
"""

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--record"]:
        from market_timers import metrics  # the record step's modules: a start loads none
        from market_timers.runner.record import counted_in_metrics, leave_end, record

        env = dict(os.environ)
        try:
            status = record(env)
            if counted_in_metrics(env):
                metrics.after_run(env)
        finally:  # last, whatever happened before: the alert handler's only news of this end
            leave_end(env, argv[1] if len(argv) > 1 else "")
        return status
    if argv[:1] == ["--supervise"]:  # on_halt's unit (controls/on_halt.py): no gate, no ledger
        from market_timers.runner import supervisor

        return supervisor.main(argv[1:])
    from market_timers import runner  # the start's: the record step loads none

    return runner.main(argv)


if __name__ == "__main__":
    sys.exit(main())
