"""Which config file a command reads: the --config given, else $MARKET_TIMERS_CONFIG, else the
default path. Its own module, importing nothing heavy, so that `market-timers event` finds the
file without loading the loader (config/loader.py re-exports it)."""

from __future__ import annotations

import os

from market_timers.contracts import environment


def config_path(cli_value: str | None) -> str:
    return cli_value or os.environ.get(environment.CONFIG) or environment.DEFAULT_CONFIG
