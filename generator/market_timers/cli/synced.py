"""What follows every sync, the command's (`market-timers sync`) and the daily refresh's: the route
warnings, the alert snapshot (the last-good copy of what alerting needs, used while the live config
is broken) and the metrics. The schedule's sync itself calls neither flow.
"""

from __future__ import annotations

import sys
from datetime import datetime

from market_timers import metrics
from market_timers.alerts import snapshot
from market_timers.config.alerts import print_route_warnings
from market_timers.schedule import selection


def after_sync(config, now: datetime) -> None:
    print_route_warnings(config)
    selection.print_warnings(config, now)
    try:
        snapshot.write(config, now)
    except (OSError, TypeError, ValueError) as e:
        print(f"market-timers sync: warning: cannot write the alert snapshot: {e}",
              file=sys.stderr)
    metrics.after_sync(config, now)
