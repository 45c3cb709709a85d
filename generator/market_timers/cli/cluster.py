"""`market-timers cluster init|status|check` and `market-timers fence check`: the cluster ledger's CLI.

    cluster init      create or migrate the ledger's schema (idempotent, versioned), run with
                      the owner role's DSN; --node-role ROLE (once per node) grants that role
                      EXECUTE on the ledger's functions but lifting a halt or a pause, and no
                      table right; --operator-role ROLE those too
    cluster status    nodes (last seen) and, per (job, session), which node ran it, when, result
    cluster check     what makes the ledger unsafe: a schema others may create in, a failover
                      without a synchronous standby (exit 1)
    fence check       inside a job: exit 0 while $MARKET_FENCE is still its lock group's token,
                      1 once superseded (another node holds the group: do not act)

The DSN comes from the credential market-timers.cluster-dsn: $CREDENTIALS_DIRECTORY inside a
unit, /etc/credstore/ for an administrator (or --dsn-file).
"""

from __future__ import annotations

import json
import os
import socket
import sys

from market_timers.contracts import environment
from market_timers.contracts.exitcodes import FAILURE, OK, USAGE
from market_timers.ledger import postgresql as pg
from market_timers.ledger.libpq import DatabaseError


def _dsn(dsn_file: str | None) -> str:
    env = dict(os.environ)
    if dsn_file:
        env[environment.CLUSTER_DSN_FILE] = dsn_file
    return pg.read_dsn(env)


def _node(cfg) -> str:
    return cfg.cluster.node if cfg is not None and cfg.cluster else os.uname().nodename


def init(cfg, dsn_file: str | None, node_roles: list[str] | None = None,
         operator_roles: list[str] | None = None) -> int:
    roles = list(dict.fromkeys(node_roles or ()))
    operators = list(dict.fromkeys(operator_roles or ()))
    try:
        with pg.connect(_dsn(dsn_file)) as conn:
            before, after = pg.init_schema(conn, roles, operators)
    except DatabaseError as e:
        print(f"market-timers cluster init: {e}", file=sys.stderr)
        return FAILURE
    if before == after:
        print(f"ledger schema is up to date (version {after})")
    elif before == 0:
        print(f"ledger schema created (version {after})")
    else:
        print(f"ledger schema migrated from version {before} to {after}")
    if roles:
        print(f"node roles {', '.join(roles)}: EXECUTE on the ledger's functions but lifting a "
              "halt or a pause, no table right")
    if operators:
        print(f"operator role {', '.join(operators)}: EXECUTE on every function (resume and "
              f"unpause included): its DSN in {pg.OPERATOR_CREDENTIAL} on each node, root's")
    else:
        print("no --node-role given: only roles granted by an earlier init (or the owner) can "
              "use the ledger; a node connecting as the owner role has every table right",
              file=sys.stderr)
    return OK


def check(cfg, dsn_file: str | None) -> int:
    """What makes the ledger unsafe (ledger/pgcheck.py): exit 1 when anything does."""
    from market_timers.ledger.pgcheck import findings

    try:
        dsn = _dsn(dsn_file)
        with pg.connect(dsn) as conn:
            good, bad = findings(conn, dsn)
    except DatabaseError as e:
        print(f"market-timers cluster check: {e}", file=sys.stderr)
        return FAILURE
    for line in good:
        print(f"ok: {line}")
    for line in bad:
        print(f"problem: {line}", file=sys.stderr)
    return FAILURE if bad else OK


def _ledger(cfg, dsn_file: str | None, command: str, then: str = ""):
    """The ledger, or None with one line on stderr (no DSN credential, an empty one)."""
    try:
        return pg.PostgresLedger(_dsn(dsn_file), _node(cfg))
    except DatabaseError as e:
        print(f"market-timers {command}: {e}{then}", file=sys.stderr)
        return None


def status(cfg, dsn_file: str | None, as_json: bool, limit: int = 50) -> int:
    ledger = _ledger(cfg, dsn_file, "cluster status")
    if ledger is None:
        return FAILURE
    try:
        if pg.schema_version(ledger.conn) == 0:
            print("market-timers cluster status: no ledger schema; run `market-timers cluster "
                  "init`", file=sys.stderr)
            return FAILURE
        nodes, runs = ledger.nodes(), ledger.runs(limit)
    except DatabaseError as e:
        print(f"market-timers cluster status: {e}", file=sys.stderr)
        return FAILURE
    finally:
        ledger.close()
    if as_json:
        print(json.dumps({"nodes": nodes, "runs": runs}, indent=2))
        return OK
    print("NODE                 LAST SEEN                      CLOCK (LAST CLAIM)   LAST ACTION")
    for n in nodes:
        print(f"{n['node']:<20} {n['last_seen']:<30} {_skew_text(n['clock_skew_ms']):<20} "
              f"{n['what']}")
    print()
    print("JOB                  SESSION      ATTEMPT NODE                 STARTED"
          "                        RESULT")
    for r in runs:
        session = f"{r['session']}+{r['slot']}" if r["slot"] else r["session"]
        print(f"{r['job']:<20} {session:<12} {r['attempt']:>7} {r['node']:<20} "
              f"{r['claimed_at']:<30} {r['result'] or 'running or unrecorded'}")
    return OK


def _skew_text(skew_ms: int | None) -> str:
    """A node's clock against the ledger's, as its last claim measured it."""
    if skew_ms is None:
        return "-"
    side = "behind" if skew_ms > 0 else "ahead"
    return f"{abs(skew_ms) / 1000:.1f} s {side}" if abs(skew_ms) >= 100 else f"{skew_ms:+d} ms"


FENCE_WAIT_SEC = 10  # the supervisor's own ledger query is bounded by 5 s (runner/start.py)


def fence_from_supervisor(fd: str, token: str, group: str) -> int:
    """Ask the job's supervisor (runner/jobuser.py), which holds the lock group's connection:
    the job has neither the DSN nor a database session of its own."""
    try:
        sock = socket.socket(fileno=os.dup(int(fd)))
    except (OSError, ValueError) as e:
        print(f"market-timers fence check: $MARKET_FENCE_FD={fd!r} is not the supervisor's "
              f"socket ({e}): do not act", file=sys.stderr)
        return FAILURE
    with sock:
        sock.settimeout(FENCE_WAIT_SEC)
        try:
            sock.send(b"check")
            reply = sock.recv(4096).decode("utf-8", "replace")
        except OSError as e:
            print(f"market-timers fence check: no answer from the job's supervisor ({e}): do "
                  "not act", file=sys.stderr)
            return FAILURE
    word, _, rest = reply.partition(" ")
    if word == "holds":
        print(f"fence {token} holds lock group {group}")
        return OK
    if word == "superseded":
        parts = rest.split(" ")
        node, fence, job, session = (parts + ["?"] * 5)[1:5]
        print(f"fence {token} is superseded: lock group {group} is held by node {node} (fence "
              f"{fence}, {job} {session}); do not act", file=sys.stderr)
        return FAILURE
    detail = rest if word == "error" else reply or "the supervisor closed the socket"
    print(f"market-timers fence check: cannot reach the ledger ({detail}): do not act",
          file=sys.stderr)
    return FAILURE


def fence_check(cfg, dsn_file: str | None) -> int:
    token, group = os.environ.get(environment.FENCE), os.environ.get(environment.LOCK_GROUP)
    if not token or not group:
        print("market-timers fence check: no $MARKET_FENCE / $MARKET_LOCK_GROUP: run it from a "
              "job started by the cluster ledger", file=sys.stderr)
        return USAGE
    if os.environ.get(environment.FENCE_FD) and dsn_file is None:
        return fence_from_supervisor(os.environ[environment.FENCE_FD], token, group)
    ledger = _ledger(cfg, dsn_file, "fence check", ": do not act")
    if ledger is None:
        return FAILURE
    try:
        if ledger.check_fence(group, token):
            print(f"fence {token} holds lock group {group}")
            return OK
        holder = ledger.lock_holder(group) or {}
    except DatabaseError as e:
        print(f"market-timers fence check: cannot reach the ledger ({e}): do not act",
              file=sys.stderr)
        return FAILURE
    finally:
        ledger.close()
    print(f"fence {token} is superseded: lock group {group} is held by node "
          f"{holder.get('node', '?')} (fence {holder.get('fence', '?')}, {holder.get('job', '?')}"
          f" {holder.get('session', '?')}); do not act", file=sys.stderr)
    return FAILURE
