import sys

from market_timers.cli.entry import main

sys.exit(main())
