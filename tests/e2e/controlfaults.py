"""The fault campaign's faults of issue 44 (tests/e2e/campaign.py injects them): the kill switch
under faults, and a node that cannot log in.

- halt-unreachable: `halt --all` made on ny4-b, mirrored by both nodes' halt-watch, then
  PostgreSQL stopped for the fault's duration, started, and the halt resumed.
- hold-watch: ny4-b's open connections to the database (its halt-watch's LISTEN among them) held
  by its proxy, new ones let through; `halt --all` on ny4-b for the fault's duration, resumed,
  released.
- no-password: one node's DSN credential without its password (libpq's "fe_sendauth: no
  password supplied") for the fault's duration: its starts are refused (175) and alerted, never
  run outside the ledger; the other node runs the fire.

Halts and resumes are made on ny4-b: its operator credential names 127.0.0.1, the database's own
address on the host's network (ny4-a is in the link's namespace for the campaign). A halt tells
once, by its own alert, not at each refused start: the campaign counts a fire that did not run
inside a halt's window as held by it, and any start inside the window as a halted job run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from .scenario import CREDSTORE

KINDS = ("halt-unreachable", "hold-watch", "no-password")
MIRROR = "var/lib/market-halt-watch/halt-all"  # each node's mirror of `halt --all`
REASON = "fault campaign"


def _halt(cluster, fault, log: Callable[[str], None]) -> None:
    """`halt --all` on ny4-b; the fault's halt window notes when it was asked and when it
    returned (a halt that also reports a problem, e.g. an alert not sent, is still in force:
    noted, the campaign goes on)."""
    asked = time.time()
    done = cluster.nodes["ny4-b"].run(["market-timers", "halt", "--all", "--reason", REASON],
                                      check=False)
    fault.halted = (asked, time.time(), float("inf"), float("inf"))
    if done.returncode:
        log(f"  halt --all exited {done.returncode}: {done.stderr.strip()}")


def _resume(cluster, fault, log: Callable[[str], None]) -> None:
    """`resume --all` on ny4-b (again while the database is starting up); the window notes when
    it was asked and when it returned (never, if it did not within 30 s: every later fire held)."""
    asked = time.time()
    b = cluster.nodes["ny4-b"]
    try:
        b.wait_for(lambda: b.run(["market-timers", "resume", "--all"],
                                 check=False).returncode == 0, 30, "the halt resumed", interval=1)
    except TimeoutError as e:
        log(f"  {e}")
        fault.halted = (*fault.halted[:2], asked, float("inf"))
        return
    fault.halted = (*fault.halted[:2], asked, time.time())


def _mirrored(cluster, log: Callable[[str], None]) -> str:
    """Wait until both nodes' halt-watch mirrored the halt; what was seen, for the note."""
    missing = []
    for name, box in cluster.nodes.items():
        try:
            box.wait_for((box.root / MIRROR).exists, 15, f"{name}'s mirror", interval=0.2)
        except TimeoutError:
            missing.append(name)
            log(f"  {name}'s halt-watch did not mirror the halt within 15 s")
    return f"not mirrored on {', '.join(missing)} within 15 s" if missing else \
        "mirrored by both nodes"


def inject_control_fault(cluster, fault, pg_unit: str, log: Callable[[str], None]) -> None:
    """Do one of KINDS (blocking for its duration) and note what was done."""
    if fault.kind == "halt-unreachable":
        _halt(cluster, fault, log)
        mirrored = _mirrored(cluster, log)
        cluster.pg.systemctl("stop", pg_unit)
        log(f"fault halt-unreachable: halt --all mirrored, PostgreSQL stopped for "
            f"{fault.seconds:.0f}s")
        try:
            time.sleep(fault.seconds)
        finally:
            cluster.pg.systemctl("start", pg_unit)
            _resume(cluster, fault, log)
        fault.note = f"halt --all on ny4-b, {mirrored}; PostgreSQL stopped, started; resumed"
    elif fault.kind == "hold-watch":
        cluster.proxy.hold_open()
        try:
            _halt(cluster, fault, log)
            log(f"fault hold-watch: ny4-b's open connections held, halt --all for "
                f"{fault.seconds:.0f}s")
            time.sleep(fault.seconds)
            _resume(cluster, fault, log)
        finally:
            cluster.proxy.release()
        fault.note = "ny4-b's open connections (its halt-watch's) held; halt --all on ny4-b, " \
                     "resumed; released"
    elif fault.kind == "no-password":
        path = cluster.nodes[fault.node].root / CREDSTORE.lstrip("/") / \
            "market-timers.cluster-dsn"
        dsn = path.read_text()
        path.write_text(re.sub(r"\s*password=\S+", "", dsn))
        log(f"fault no-password: {fault.node}'s DSN without its password for "
            f"{fault.seconds:.0f}s")
        try:
            time.sleep(fault.seconds)
        finally:
            path.write_text(dsn)
        fault.note = "its DSN credential without the password, then restored"
    else:
        raise ValueError(f"unknown fault {fault.kind!r}")
