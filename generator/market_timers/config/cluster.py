"""The `[cluster]` table: run the ledger on PostgreSQL, shared by two or more hosts.

    [cluster]
    node = "ny4-a"             # this host's name in the ledger (default: the hostname)
    standby_delay = "2s"       # 0 on the preferred node; a standby waits this long before claiming
    on_db_unreachable = "skip" # skip | run: what a node does when it cannot reach the ledger
    max_clock_skew_ms = 1000   # a claim from a node whose clock is further off the ledger's is
                               # refused (exit 179): see DEFAULT_MAX_CLOCK_SKEW_MS

Without the table the ledger is local (files under state_dir). The DSN is a secret: the systemd
credential `market-timers.cluster-dsn` (LoadCredential=), never the config.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from market_timers.schema.durations import parse_duration
from market_timers.schema.problems import Problems
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import one_of, whole

DSN_CREDENTIAL = "market-timers.cluster-dsn"
ON_DB_UNREACHABLE = ("skip", "run")
NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
MAX_STANDBY_DELAY = 3600
# The bound on |ledger's clock - node's clock| at a claim (ledger/postgresql.py). 1 s: NTP or
# chrony keep the hosts of one site within milliseconds, so a second never refuses a healthy node,
# while a step (a VM resumed, an RTC reset, an operator's `date -s`) is seconds or more; and a
# second is well under a job's grace and a standby's delay (seconds), so a node within it fires
# less than a second off the instant. The claim's one-way time to the server is measured in it
# (the runner tells a slow statement from a slow clock by the answer's round trip).
DEFAULT_MAX_CLOCK_SKEW_MS = 1000
MAX_CLOCK_SKEW_BOUNDS = (10, 60000)


@dataclass(frozen=True)
class ClusterConfig:
    node: str
    standby_delay: int = 0  # seconds
    on_db_unreachable: str = "skip"
    max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS


def _node(value: object) -> str:
    if not isinstance(value, str) or not NODE.match(value):
        raise Bad("a host name: letters, digits, '.', '_' and '-', at most 63 characters, e.g. "
                  '"ny4-a"')
    return value


def _standby_delay(value: object) -> int:
    if value in (0, "0", "0s") and not isinstance(value, bool):  # the preferred node
        return 0
    try:
        return parse_duration(value, MAX_STANDBY_DELAY, "and less than every job's grace")
    except ValueError as e:
        raise Bad(f'{e}; e.g. "2s" on a standby, "0s" on the preferred node') from None


def _dsn_hint(key: str) -> str:
    return (f"; the DSN is the credential {DSN_CREDENTIAL}, never a config key"
            if "dsn" in key.lower() else "")


TABLE = Table((
    Key("node", _node, "invalid", "this host's name in the ledger (default: the host name)"),
    Key("standby_delay", _standby_delay, 0,
        "how long a standby waits before claiming a run; 0 on the preferred node"),
    Key("on_db_unreachable", one_of(ON_DB_UNREACHABLE, "skip (do not run the job, raise a "
        "critical alert: the default) or run (run it anyway: it may then run on two nodes)"),
        "skip", "what a node does when it cannot reach the ledger: skip or run"),
    Key("max_clock_skew_ms", whole(*MAX_CLOCK_SKEW_BOUNDS), DEFAULT_MAX_CLOCK_SKEW_MS,
        "the most this node's clock may differ from the ledger's at a claim (milliseconds)"),
), not_table="must be a table ([cluster])", sort_known=False, hint=_dsn_hint)
KEYS = TABLE.names


def parse_cluster(raw, problems: Problems) -> ClusterConfig | None:
    """Validate `[cluster]` (None: no table, the local ledger). Problems are added, not raised."""
    if raw is None:
        return None
    if isinstance(raw, dict) and "node" not in raw:
        raw = {"node": socket.gethostname(), **raw}  # checked like a node written in the file
    values = TABLE.parse(raw, "cluster", problems)
    return None if values is None else ClusterConfig(**values)


def check_against_jobs(cluster: ClusterConfig | None, jobs, problems: Problems) -> None:
    """A standby waiting as long as a job's grace would always find its start stale."""
    if cluster is None or not cluster.standby_delay:
        return
    for job in jobs:
        if cluster.standby_delay >= job.grace:
            problems.add("cluster.standby_delay", f"must be less than the grace of job "
                         f"{job.name!r} ({job.grace} s): a standby's start would always be "
                         "refused as stale", f"{cluster.standby_delay}s")
