"""The command line, and the only layer that composes the flows: e.g. `sync` runs the schedule's
sync, then writes the alert snapshot, then the metrics; the record step of `market-timers-run`
records the run, then updates the metrics. No flow calls another flow's side effects.

entry.py     `market-timers`: the parser (parser.py) and the dispatch to commands.py
run.py       `market-timers-run`: the runner's entry point (the start is runner/, import-light)
commands.py  every command, each a call into one flow or a composition of flows
cluster.py   `cluster init|status`, `fence check`

This face imports nothing, so that `market-timers-run` loads only what a start needs.
"""


def main(argv: list[str] | None = None) -> int:
    """`market-timers` (see entry.py)."""
    from market_timers.cli.entry import main as entry_main

    return entry_main(argv)


def build_parser():
    from market_timers.cli.parser import build_parser as build

    return build()
