"""The command line, and the only layer that composes the flows: e.g. `sync` runs the schedule's
sync, then writes the alert snapshot, then the metrics; the record step of `market-timers-run`
records the run, then updates the metrics. No flow calls another flow's side effects.

entry.py     `market-timers`: the parser (parser.py) and the dispatch to commands.py
commands.py  every command, each a call into one flow or a composition of flows
cluster.py   `cluster init|status`, `fence check`

This face imports nothing. `market-timers-run`, the units' entry point, is ../run.py: a start loads
no module of the command line.
"""


def main(argv: list[str] | None = None) -> int:
    """`market-timers` (see entry.py)."""
    # entry point only: importing cli loads no command
    from market_timers.cli.entry import main as entry_main

    return entry_main(argv)


def build_parser():
    # the parser and its help texts: for the docs test and entry.py
    from market_timers.cli.parser import build_parser as build

    return build()
