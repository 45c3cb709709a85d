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
- primary-failover: PostgreSQL's primary stopped at once (a crash) right after a fire's claim
  committed (its job's first line in starts.log: the runner claims before it starts the job), the
  synchronous standby promoted, the old primary made the promoted one's synchronous standby
  (tests/e2e/pgstandby.py). The standby is made once, before the campaign's first fire
  (`failover_pair`), and each node's DSN names both servers, read-write sessions only: ny4-a's
  both by the veth's host address, ny4-b's its proxy (which follows the primary, so that a held
  proxy still holds ny4-b) and the standby of the moment; the nodes' operator credential names
  both too. Later faults act on the primary of the moment (cluster.port, cluster.pair).

Halts and resumes are made on ny4-b: its operator credential names 127.0.0.1, the database's own
address on the host's network (ny4-a is in the link's namespace for the campaign). A halt tells
once, by its own alert, not at each refused start: the campaign counts a fire that did not run
inside a halt's window as held by it, and any start inside the window as a halted job run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .cluster import LOG_DIR, OPERATOR_CREDENTIAL, OPERATOR_ROLE
from .container import ContainerError
from .pgstandby import PRIMARY, STANDBY, StandbyPair, fail_over, rebuild, standby_pair
from .scenario import CREDSTORE

KINDS = ("halt-unreachable", "hold-watch", "no-password", "primary-failover")
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


@contextmanager
def failover_pair(cluster, kinds: tuple[str, ...]) -> Iterator[StandbyPair | None]:
    """The standby, made once for a campaign with primary failovers (None for one without),
    and every DSN naming both servers; at the end `main` the primary again, its DSNs as before
    (behind_link and through_proxy write theirs after)."""
    if "primary-failover" not in kinds:
        yield None
        return
    try:
        with standby_pair(cluster) as pair:
            _pair_dsns(cluster, pair)
            for box in cluster.nodes.values():  # it reads its DSN credential as it starts
                box.systemctl("restart", "market-halt-watch.service")
            yield pair
    finally:
        cluster.pair = None
        cluster.proxy.upstream_port = cluster.port
        _operator_dsn(cluster, cluster.dsn(OPERATOR_ROLE))


def _pair_dsns(cluster, pair: StandbyPair) -> None:
    """ny4-a (behind the link) names both servers; ny4-b its proxy, pointed at the primary of
    the moment, and the standby: never the primary but through the proxy, which may hold it."""
    both = f"{pair.ports[PRIMARY]},{pair.ports[STANDBY]}"
    cluster.write_dsn("ny4-a", f"{cluster.link.host_addr},{cluster.link.host_addr}", both)
    cluster.proxy.upstream_port = cluster.port
    cluster.write_dsn("ny4-b", "127.0.0.1,127.0.0.1",
                      f"{cluster.proxy.port},{pair.ports[pair.standby]}")
    _operator_dsn(cluster, cluster.dsn(OPERATOR_ROLE, "127.0.0.1,127.0.0.1", both))


def _operator_dsn(cluster, dsn: str) -> None:
    """Each node's operator credential (root's: halt, resume), written in its root directory
    (running or not)."""
    for box in cluster.nodes.values():
        path = box.root / OPERATOR_CREDENTIAL.lstrip("/")
        path.write_text(dsn + "\n")
        path.chmod(0o600)


def _start_lines(cluster) -> list[str]:
    """Both nodes' starts.log lines: "<node> <job> <scheduled or slot> <start>"."""
    lines = []
    for box in cluster.nodes.values():
        path = box.root / LOG_DIR.lstrip("/") / "starts.log"
        lines += path.read_text().splitlines() if path.exists() else []
    return lines


def _fail_over_after_a_claim(cluster, fault, log: Callable[[str], None]) -> None:
    """Wait (8 s at most) for a job to start, its claim committed; then the failover, the
    proxy and the DSNs pointed at the promoted server, and the pair made again (if that fails,
    the campaign goes on against the promoted server alone, and later failovers are skipped)."""
    pair = cluster.pair
    if not pair.streaming:
        fault.note = "skipped: no standby (making the last one failed)"
        return
    seen = set(_start_lines(cluster))
    try:
        node, job = cluster.pg.wait_for(
            lambda: [line for line in _start_lines(cluster)
                     if line not in seen and len(line.split()) == 4], 8,
            "a job's start", interval=0.02)[0].split()[:2]
    except TimeoutError:
        node, job = "", ""
    old = pair.primary
    promoted = fail_over(cluster, pair)
    _pair_dsns(cluster, pair)
    log(f"fault primary-failover: {old} stopped after {job or 'no'} start on {node or '-'}, "
        f"{pair.primary} promoted in {promoted:.1f}s")
    fault.note = (f"{old} stopped at once right after {job}'s start on {node} (its claim on "
                  f"the promoted server: {_holder(cluster, job)})" if job else
                  f"{old} stopped at once (no job started within 8 s)") + \
        f"; {pair.primary} promoted in {promoted:.1f} s"
    try:
        fault.note += f"; {old} made its synchronous standby in {rebuild(cluster, pair):.0f} s"
    except (TimeoutError, ContainerError) as e:
        pair.streaming = False
        fault.note += f"; {old} not made its standby ({str(e)[:200]}): the rest runs without"
        log(f"  {e}")
    fault.seconds = round(time.time() - fault.at, 1)


def _holder(cluster, job: str) -> str:
    """The node of the job's last claim on the primary of the moment."""
    try:
        return cluster.psql(f"SELECT node FROM mt_runs WHERE job = '{job}' ORDER BY "
                            "claimed_at DESC LIMIT 1") or "missing"
    except ContainerError as e:
        return f"not read: {str(e)[:200]}"


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
    elif fault.kind == "primary-failover":
        _fail_over_after_a_claim(cluster, fault, log)
    else:
        raise ValueError(f"unknown fault {fault.kind!r}")
