"""`python -m market_timers.runner`: the same as `market-timers-run`."""

import sys

from market_timers.runner import main

sys.exit(main())
