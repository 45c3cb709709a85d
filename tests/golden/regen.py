"""Regenerate tests/golden/units from tests/golden/config.toml; review the diff before committing."""

import os
import shutil
import sys
from pathlib import Path

from market_timers import cli

here = Path(__file__).resolve().parent
os.chdir(here)  # units name the config as given: keep the path relative
shutil.rmtree(here / "units", ignore_errors=True)
sys.exit(cli.main(["--config", "config.toml", "--now", "2025-11-26T12:00:00Z",
                   "render", "--out", "units"]))
