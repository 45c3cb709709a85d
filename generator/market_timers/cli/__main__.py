import sys

from market_timers.cli import main

sys.exit(main())
