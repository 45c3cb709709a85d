"""`market-timers halt-watch`: each cluster node's listener for the kill switch.

A halt made on any node is a row of the cluster ledger (ledger/halts.py), so every node's runner
refuses the starts it covers. The runs already going on another host are this listener's: it
LISTENs on the ledger's halt channel (postgresql.HALT_CHANNEL, notified by mt_halt and mt_unhalt)
and, at each notification, reads the halts in force and stops (`systemctl stop`: SIGTERM, then
SIGKILL after the unit's TimeoutStopSec=) the services of this host's jobs that a halt covers.
It also looks every RECHECK_SEC without a notification (a notification sent while it was
reconnecting is not replayed), and at its start: a node that was down or cut off when the halt
was made stops what runs as soon as it is back (its runner refuses every new start anyway).

It runs as root (the unit market-halt-watch.service: stopping units is root's), with the DSN
credential; without [cluster] in the config there is nothing to watch and it exits 0.

It cannot hang (issue 44: a proxy that held the bytes froze it for good): each connect, query
and LISTEN has a deadline (QUERY_SEC), and the wait for a notification is RECHECK_SEC; a step
past its deadline drops the connection and makes a new one. Each look mirrors the halts on this
node (ledger/haltmirror.py: the runner's answer when the ledger cannot be reached) and sends
systemd WATCHDOG=1 (WatchdogSec= on its unit kills and restarts a frozen one); the dead-man
alerts when the mirror says it has not looked for a while (watch/haltwatch_fresh.py).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from market_timers.contracts import unitname
from market_timers.contracts.exitcodes import OK
from market_timers.ledger import DatabaseError, haltmirror, halts, parse_fields
from market_timers.ledger import postgresql as pg

RECHECK_SEC = 30
RECONNECT_SEC = 1.0
# The bound of a connect or a query (LISTEN, mt_halt_list()): a look takes at most about
# QUERY_SEC * 2 + RECHECK_SEC, well inside WatchdogSec= (units/market-halt-watch.service).
QUERY_SEC = 10


def _say(text: str) -> None:
    print(f"market-timers halt-watch: {text}", file=sys.stderr, flush=True)


def covered_units(config, records, systemctl) -> list[str]:
    """The running (active or starting) services of this config's jobs that the halts cover."""
    jobs = [j.name for j in config.jobs
            if any(halts.covers(scope, name, j.name, j.lock, bool(getattr(j, "orders", False)))
                   for scope, name, _ in records)]
    return systemctl.running([unitname.job_services_glob(job) for job in jobs])


def stop_covered(config, records, systemctl) -> list[str]:
    """One look: stop what the halts cover here; the units it stopped."""
    units = covered_units(config, records, systemctl) if records else []
    if units:
        reasons = "; ".join(f"{halts.describe(s, n)} by {f.get('by', '?')} on "
                            f"{f.get('host', '?')} ({f.get('reason', '')})" for s, n, f in records)
        _say(f"stopping {', '.join(units)}: halted ({reasons})")
        systemctl.stop(units)
    return units


def watch(config, *, systemctl=None, passes: int | None = None,
          load_config: Callable[[], object] | None = None) -> int:
    """Listen and stop until killed (`passes`: that many looks, then return; the tests')."""
    mirror = haltmirror.mirror_dir()
    _notify("READY=1")  # Type=notify: also before a clean exit, which is no failure
    if getattr(config, "cluster", None) is None:
        _say(f"no [cluster] in {config.source}: nothing to watch (a halt on this host stops "
             "its runs itself)")
        haltmirror.clear(mirror)
        return OK
    if systemctl is None:
        from market_timers.host.systemctl import Systemctl

        systemctl = Systemctl()
    looks = 0
    conn = None
    while passes is None or looks < passes:
        try:
            if conn is None:
                conn = pg.connect(pg.read_dsn(dict(os.environ)), _deadline())
                conn.execute(f"LISTEN {pg.HALT_CHANNEL}", deadline=_deadline())
                _say(f"listening on the cluster ledger as node {config.cluster.node}")
            config = _look(conn, config, systemctl, mirror, load_config)
            looks += 1
            if passes is not None and looks >= passes:
                break
            conn.notifications(RECHECK_SEC)  # a halt or resume anywhere, or the recheck
        except (DatabaseError, OSError) as e:  # unreachable, broke, past a deadline: again
            _say(f"the cluster ledger: {e}; trying again in {RECONNECT_SEC:.0f} s")
            if conn is not None:
                conn.close()
            conn = None
            looks += 1 if passes is not None else 0
            _notify("WATCHDOG=1")  # alive, not hung: the dead-man tells it cannot look
            time.sleep(RECONNECT_SEC)
    if conn is not None:
        conn.close()
    return OK


def _look(conn, config, systemctl, mirror: str, load_config):
    """One look: the halts in force, mirrored here, and what they cover stopped; the config."""
    rows = conn.execute("SELECT * FROM mt_halt_list()", deadline=_deadline())
    records = [(scope, name, parse_fields(fields)) for scope, name, fields in rows]
    try:
        haltmirror.write(mirror, records)
    except OSError as e:  # the runs are still stopped; the dead-man sees the mirror go stale
        _say(f"cannot mirror the halts in {mirror}: {e}")
    if records and load_config is not None:
        config = load_config()  # a job added since: covered too
    stop_covered(config, records, systemctl)
    _notify("WATCHDOG=1")
    return config


def _deadline() -> float:
    return time.time() + QUERY_SEC


def _notify(message: str) -> None:
    """sd_notify under systemd (Type=notify, WatchdogSec=); nothing by hand or in the tests."""
    if os.environ.get("NOTIFY_SOCKET"):
        import sdnotify

        sdnotify.SystemdNotifier().notify(message)
