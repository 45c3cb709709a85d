"""In a cluster, the dead-man's check that this node's halt-watch still looks (issue 44).

halt-watch (controls/haltwatch.py) stops this host's runs when a halt is made on any node, and
mirrors the halts for the runner's start that cannot reach the ledger. A frozen or cut-off
halt-watch would leave a halted job running here, and a stale mirror: so when its last look
(ledger/haltmirror.py `looked`) is older than STALE_SEC, the heartbeat pings /fail at every
pass and one critical `halt-watch-stale` alert per outage says so (its start is kept in
<state_dir>/halt-watch-stale until it looks again). A node whose halt-watch never looked (no
mirror yet) is left to its unit's own failure alert and the failed-unit check (deadman.py).
"""

from __future__ import annotations

import os
from datetime import datetime

from market_timers.contracts.instants import iso
from market_timers.ledger import haltmirror

# It looks at least every 30 s (RECHECK_SEC), each step within 10 s; the dead-man runs each minute.
STALE_SEC = 120
MARKER = "halt-watch-stale"


def check_halt_watch(config, now: datetime, result, alert) -> None:
    """One dead-man pass's look at halt-watch's freshness (nothing outside a cluster)."""
    cluster = getattr(config, "cluster", None)
    if cluster is None:
        return
    path = haltmirror.mirror_dir()
    looked = haltmirror.last_look(path)
    if looked is None:
        return
    marker = os.path.join(str(config.state_dir), MARKER)
    age = now.timestamp() - looked
    if age <= STALE_SEC:
        if os.path.exists(marker):
            os.unlink(marker)
        return
    text = (f"market-halt-watch on node {cluster.node} last looked at the cluster's halts "
            f"{age:.0f} s ago (more than {STALE_SEC} s): a halt made on another node may not "
            f"stop this node's runs, and its mirror in {path} may be stale. "
            "`systemctl status market-halt-watch`, `journalctl -u market-halt-watch`")
    result.unhealthy.append(f"halt-watch has not looked for {age:.0f} s")
    if os.path.exists(marker):
        return
    alert(config, kind=MARKER, key=f"{MARKER}:{cluster.node}", text=text, now=now,
          title=f"market-halt-watch on {cluster.node} has stopped looking at the halts")
    with open(marker, "w", encoding="utf-8") as f:
        f.write(iso(now) + "\n")
