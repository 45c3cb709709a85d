"""The `[cluster]` table: run the ledger on PostgreSQL, shared by two or more hosts.

    [cluster]
    node = "ny4-a"             # this host's name in the ledger (default: the hostname)
    standby_delay = "2s"       # 0 on the preferred node; a standby waits this long before claiming
    on_db_unreachable = "skip" # skip | run: what a node does when it cannot reach the ledger

Without the table the ledger is local (files under state_dir). The DSN is a secret: the systemd
credential `market-timers.cluster-dsn` (LoadCredential=), never the config.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from market_timers.schema.durations import parse_duration
from market_timers.schema.problems import Problems

DSN_CREDENTIAL = "market-timers.cluster-dsn"
KEYS = ("node", "standby_delay", "on_db_unreachable")
ON_DB_UNREACHABLE = ("skip", "run")
NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_STANDBY_DELAY = 3600


@dataclass(frozen=True)
class ClusterConfig:
    node: str
    standby_delay: int = 0  # seconds
    on_db_unreachable: str = "skip"


def parse_cluster(raw, problems: Problems) -> ClusterConfig | None:
    """Validate `[cluster]` (None: no table, the local ledger). Problems are added, not raised."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.add("cluster", "must be a table ([cluster])", raw)
        return None
    for key in sorted(set(raw) - set(KEYS)):
        problems.add(f"cluster.{key}", f"unknown key (known: {', '.join(KEYS)}); the DSN is the "
                     f"credential {DSN_CREDENTIAL}, never a config key" if "dsn" in key.lower()
                     else f"unknown key (known: {', '.join(KEYS)})")
    node = raw.get("node", socket.gethostname())
    if not isinstance(node, str) or not NODE.match(node):
        problems.add("cluster.node", "a host name: letters, digits, '.', '_' and '-', at most 63 "
                     'characters, e.g. "ny4-a"', node)
        node = "invalid"
    delay = 0
    if "standby_delay" in raw:
        value = raw["standby_delay"]
        zero = value in (0, "0", "0s") and not isinstance(value, bool)  # the preferred node
        try:
            delay = 0 if zero else parse_duration(value, MAX_STANDBY_DELAY,
                                                  "and less than every job's grace")
        except ValueError as e:
            problems.add("cluster.standby_delay", f'{e}; e.g. "2s" on a standby, "0s" on the '
                         "preferred node", value)
    mode = raw.get("on_db_unreachable", "skip")
    if mode not in ON_DB_UNREACHABLE:
        problems.add("cluster.on_db_unreachable", "skip (do not run the job, raise a critical "
                     "alert: the default) or run (run it anyway: it may then run on two nodes)",
                     mode)
        mode = "skip"
    return ClusterConfig(node=node, standby_delay=delay, on_db_unreachable=mode)


def check_against_jobs(cluster: ClusterConfig | None, jobs, problems: Problems) -> None:
    """A standby waiting as long as a job's grace would always find its start stale."""
    if cluster is None or not cluster.standby_delay:
        return
    for job in jobs:
        if cluster.standby_delay >= job.grace:
            problems.add("cluster.standby_delay", f"must be less than the grace of job "
                         f"{job.name!r} ({job.grace} s): a standby's start would always be "
                         "refused as stale", f"{cluster.standby_delay}s")
