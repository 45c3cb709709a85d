"""The cluster ledger: the run ledger in PostgreSQL, shared by every node of a cluster.

Exactly once across nodes is PostgreSQL's unique key: attempt 1 of a (job, session, slot) is one
row, inserted with ON CONFLICT DO NOTHING, so of any number of nodes racing for a key exactly one
insert returns a row (the others read the holder and exit 173). No home-made protocol: the database
serialises, the same way Airflow's HA schedulers coordinate through row locks.

Lock groups are cluster-wide with a session-level advisory lock on the runner's connection. The
runner execs the job with that connection's socket inherited (as it does with the flock fd), so
the lock lives exactly as long as the job's process: when the job ends or is killed, the kernel
closes the socket and PostgreSQL releases the lock at once. When the whole node dies without
closing it (power cut, network gone), the server notices through TCP keepalives set on the session
(idle 5 s, 3 probes 5 s apart) and tcp_user_timeout (10 s): the lock is released within
HOLDER_DEATH_BOUND_SEC = 20 s.

Fencing: every acquisition of a lock group takes the next number of the sequence mt_fence and
writes it, with the holder's backend pid, into mt_locks. The job receives it as MARKET_FENCE;
`market-timers fence check` (check_fence) answers true only while that row still names this token
and that backend still holds the group's advisory lock (pg_locks). A node that lost its lock (its connection was
cut, another node took the group) is refused: its token is superseded, forever, since tokens only
grow.

Faults (issue 23). Only a connection that cannot be made is "unreachable" ([cluster]
on_db_unreachable decides). Once connected, a busy database (RETRYABLE: lock timeout, statement
timeout, serialisation failure, deadlock) is retried until the start's deadline (`deadline`, set
by the runner to instant + grace), and a broken connection is reconnected while nothing depends
on it (no lock group taken, no claim sent); past the deadline the step raises DeadlinePassed and
the runner refuses the start as stale. Every step is bounded on the client too: connect_timeout
(at most what is left of the deadline), client keepalives and tcp_user_timeout in the conninfo
(CLIENT_SETTINGS), and each query waits for its answer until the deadline only (libpq.py).

Least privilege (issue 23). Two kinds of role: the owner, which runs `market-timers cluster
init` and owns the tables and the functions (FUNCTIONS), and one role per node, the role of that
node's DSN, which `cluster init --node-role ROLE` grants EXECUTE on the functions and nothing else:
no table or sequence right at all (revoked from PUBLIC and from every node role at each init).
Every call of the runner and the readers is one function: SECURITY DEFINER (it runs as the
owner), search_path pinned to the ledger's schema with pg_temp last (a caller's objects are never
resolved in it). So a process that holds a node's DSN cannot DELETE or UPDATE rows; the functions
record the claiming role (session_user), and only that role may withdraw or finish its claim, so
another node's DSN cannot end, fail or delete this node's claim either.
Why a role per node: pg_terminate_backend ends a backend only for a member of the backend's role
(or of pg_signal_backend). With one role per node, none a member of another's (init refuses
that, a superuser and pg_signal_backend), a process with node a's DSN cannot end node b's backend,
and so cannot release the lock group b's job holds: PostgreSQL's own rule, no home-made lease.
What a node role can still do to itself: end its own backends (its own runs' lock groups; the
fence then says superseded), and take lock groups or claims under its own name (a refusal seen
by the operator, never a second run of a claimed session).

Clocks (issue 23, "a clock step on one node"). The ledger's clock is the cluster's reference: a
node's timers fire by its own clock, and its runner judges the grace by it, so a node 30 s behind
would run an order job 30 s late and one ahead would run it early. The claim carries the node's
clock reading (time.time() as the statement is sent) and the bound ([cluster] max_clock_skew_ms,
MARKET_MAX_CLOCK_SKEW_MS, default 1000); mt_claim compares the reading with the server's
clock_timestamp() in the same statement and, more than the bound apart, refuses it (no row
written, so the session stays runnable: the node whose clock is right claims it at its standby
delay) and answers the measured skew (the ledger's clock minus the node's; positive: the node is
behind), which it also keeps in mt_nodes for `market-timers cluster status`. The runner then
refuses the start (ClockSkewed, exit 179, a critical alert). One round trip, as before.
The reading is measured on arrival, so the statement's one-way time counts in it: a claim held
up on its way (a stalled link) looks "behind". When the answer's round trip explains the skew
(the ledger's clock lies between the reading and the answer's arrival, within the bound), the
clock is not to blame: the claim is sent again with a new reading (CLAIM_RESENDS times, until the
deadline). A node ahead cannot be explained so (the way only adds time): refused at once.

Schema: versioned in mt_schema, created or migrated by `market-timers cluster init` (MIGRATIONS:
version 1 the tables, version 2 the claiming role's columns, version 3 the pauses, version 4 the
halts, version 5 the nodes' clock skew (and mt_claim's signature with the clock reading: the
version-4 signature is kept, without the check, so that a node not yet upgraded still claims
during a rolling upgrade; upgrade the schema first, then the nodes); the functions
are (re)created by every init after the migrations; idempotent,
serialised by a transaction-level advisory lock, one transaction: a failed init changes nothing).
"""

from __future__ import annotations

import os
import time

from market_timers.contracts import environment
from market_timers.ledger import (
    Claim,
    ClockSkewed,
    ConnectionLost,
    DatabaseError,
    DeadlinePassed,
    Key,
    Ledger,
    TimedOut,
    Unreachable,
    format_fields,
    parse_fields,
)
from market_timers.ledger.conninfo import has_param, with_defaults, with_param
from market_timers.ledger.libpq import UNIQUE_VIOLATION, Connection

HOLDER_DEATH_BOUND_SEC = 20
# Per-session server settings: how fast PostgreSQL notices a dead node (see module doc), and
# bounds on every statement. Sent in the start-up packet (libpq's `options`): no round trip.
SESSION_SETTINGS = (
    ("tcp_keepalives_idle", "5"), ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"), ("tcp_user_timeout", "10000"),
    ("statement_timeout", "10000"), ("lock_timeout", "5000"),
    # a statement of a client that gave up (its deadline passed, the connection closed) ends
    # within a second, rather than holding its locks until it completes
    ("client_connection_check_interval", "1000"),
)
CONNECT_TIMEOUT_SEC = 3
# The client's side of the same (conninfo; the DSN's own value wins): libpq notices a dead server
# as the server notices a dead node, while the job holds the lock group's connection.
CLIENT_SETTINGS = (
    ("keepalives", "1"), ("keepalives_idle", "5"), ("keepalives_interval", "5"),
    ("keepalives_count", "3"), ("tcp_user_timeout", "10000"),
    ("gssencmode", "disable"),  # with "prefer", libpq probes for Kerberos credentials: ~3 ms
)
# SQLSTATEs of a live, busy database: retried until the start's deadline, never "unreachable".
RETRYABLE = {"55P03": "lock timeout", "57014": "statement timeout or cancelled",
             "40001": "serialization failure", "40P01": "deadlock",
             "53300": "no connection slot free", "57P03": "the server is starting up"}
RETRY_PAUSE_SEC = 0.2
# A step that decides nothing (the peek at the holder, a refusal's note, taking back a claim) may
# take this long past the start's deadline: the peek still says "already ran" for a late start.
AFTER_DEADLINE_SEC = 3
# A claim refused for a skew that its own round trip explains (see the module doc) is sent again
# with a new reading, at most this many times (and never past the start's deadline).
CLAIM_RESENDS = 5
INIT_LOCK = 7305210  # pg_advisory_xact_lock key serialising `cluster init`
LOCK_NAMESPACE = "market-timers lock group "
HALT_CHANNEL = "market_timers_halt"  # NOTIFY channel of every halt and resume

# Version 1: the tables (no role but the owner's). Version 2: least privilege (see the module
# doc): the tables are reached through the SECURITY DEFINER functions below only.
V1 = """
CREATE TABLE mt_nodes (
    node text PRIMARY KEY,
    last_seen timestamptz NOT NULL DEFAULT now(),
    what text NOT NULL DEFAULT ''
);
CREATE SEQUENCE mt_fence;
CREATE TABLE mt_runs (
    job text NOT NULL,
    session text NOT NULL,
    slot text NOT NULL DEFAULT '',
    attempt integer NOT NULL CHECK (attempt >= 1),
    how text NOT NULL,
    node text NOT NULL,
    fence bigint NOT NULL,
    invocation text,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    fields text NOT NULL,
    finished_at timestamptz,
    result text,
    PRIMARY KEY (job, session, slot, attempt)
);
CREATE TABLE mt_refusals (
    id bigserial PRIMARY KEY,
    job text NOT NULL,
    session text NOT NULL,
    slot text NOT NULL DEFAULT '',
    node text NOT NULL,
    invocation text,
    at timestamptz NOT NULL DEFAULT now(),
    fields text NOT NULL,
    result text
);
CREATE INDEX mt_refusals_key ON mt_refusals (job, session, slot);
CREATE TABLE mt_tickets (
    nonce text PRIMARY KEY,
    job text NOT NULL,
    session text NOT NULL,
    fields text NOT NULL
);
CREATE TABLE mt_locks (
    grp text PRIMARY KEY,
    fence bigint NOT NULL,
    node text NOT NULL,
    job text NOT NULL,
    session text NOT NULL,
    backend_pid integer NOT NULL,
    backend_start timestamptz NOT NULL,
    since timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE mt_misses (
    job text NOT NULL,
    session text NOT NULL,
    slot text NOT NULL DEFAULT '',
    node text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, session, slot)
);
"""

# Every function runs as its owner (the role that ran `cluster init`) with search_path pinned to
# the ledger's schema ({schema}), pg_temp last: a caller's objects are never resolved in it.
_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp"
FUNCTIONS = (
    ("mt_claim(text, text, text, integer, text, text, text, text, text)", """
RETURNS bigint LANGUAGE plpgsql {definer} AS $$
DECLARE f bigint;
BEGIN
    INSERT INTO mt_runs (job, session, slot, attempt, how, node, fence, invocation, fields,
                         claimed_by)
    VALUES ($1, $2, $3, $4, $5, $6, nextval('mt_fence'), $7, $8, session_user)
    ON CONFLICT DO NOTHING RETURNING fence INTO f;
    IF f IS NOT NULL THEN
        INSERT INTO mt_nodes (node, last_seen, what) VALUES ($6, now(), $9)
        ON CONFLICT (node) DO UPDATE SET last_seen = now(), what = $9;
    END IF;
    RETURN f;
END $$"""),
    # Version 5: the claim with the node's clock reading ($10, epoch seconds) and the bound
    # ($11, ms). Refused (nothing written but the node's measured skew) when the server's
    # clock_timestamp() is more than the bound away; the version-4 signature above is kept for a
    # runner not yet upgraded.
    ("mt_claim(text, text, text, integer, text, text, text, text, text, double precision, "
     "integer)", """
RETURNS TABLE (fence_token bigint, skew_ms integer, skew_refused boolean)
LANGUAGE plpgsql {definer} AS $$
DECLARE f bigint; skew integer;
BEGIN
    skew := round((extract(epoch FROM clock_timestamp()) - $10) * 1000);
    IF abs(skew) <= $11 THEN
        INSERT INTO mt_runs (job, session, slot, attempt, how, node, fence, invocation, fields,
                             claimed_by)
        VALUES ($1, $2, $3, $4, $5, $6, nextval('mt_fence'), $7, $8, session_user)
        ON CONFLICT DO NOTHING RETURNING fence INTO f;
    END IF;
    IF f IS NOT NULL OR abs(skew) > $11 THEN  -- a won claim or a refused clock: noted
        INSERT INTO mt_nodes AS n (node, last_seen, what, clock_skew_ms, clock_checked_at)
        VALUES ($6, now(), CASE WHEN f IS NULL THEN '' ELSE $9 END, skew, now())
        ON CONFLICT (node) DO UPDATE SET last_seen = now(), clock_skew_ms = skew,
            clock_checked_at = now(), what = CASE WHEN f IS NULL THEN n.what ELSE $9 END;
    END IF;
    RETURN QUERY SELECT f, skew, abs(skew) > $11;
END $$"""),
    ("mt_node_clocks()", """
RETURNS TABLE (node text, clock_skew_ms integer, clock_checked_at timestamptz)
LANGUAGE sql STABLE {definer} AS $$
    SELECT node, clock_skew_ms, clock_checked_at FROM mt_nodes ORDER BY node $$"""),
    ("mt_holder(text, text, text)", """
RETURNS TABLE (fields text, node text, fence bigint) LANGUAGE sql STABLE {definer} AS $$
    SELECT fields, node, fence FROM mt_runs WHERE job = $1 AND session = $2 AND slot = $3
    AND attempt = 1 $$"""),
    ("mt_last_attempt(text, text, text)", """
RETURNS TABLE (attempt integer, result text) LANGUAGE sql STABLE {definer} AS $$
    SELECT attempt, result FROM mt_runs WHERE job = $1 AND session = $2 AND slot = $3
    ORDER BY attempt DESC LIMIT 1 $$"""),
    ("mt_refuse(text, text, text, text, text, text)", """
RETURNS void LANGUAGE sql {definer} AS $$
    INSERT INTO mt_refusals (job, session, slot, node, invocation, fields, noted_by)
    VALUES ($1, $2, $3, $4, $5, $6, session_user) $$"""),
    # Only the role that claimed (or noted a refusal) can take it back or finish it: a process
    # with another node's DSN cannot end, fail or delete this node's claim.
    ("mt_withdraw(text, text, text, text, text, bigint)", """
RETURNS integer LANGUAGE sql {definer} AS $$
    WITH gone AS (DELETE FROM mt_runs WHERE job = $1 AND session = $2 AND slot = $3 AND
        node = $4 AND finished_at IS NULL AND claimed_by = session_user AND
        ($5 IS NULL OR invocation = $5) AND ($6 IS NULL OR fence = $6) RETURNING 1)
    SELECT count(*)::integer FROM gone $$"""),
    ("mt_finish(text, text, text, text, text, text)", """
RETURNS text LANGUAGE plpgsql {definer} AS $$
BEGIN
    UPDATE mt_runs SET finished_at = now(), result = $5, fields = mt_runs.fields || $6
    WHERE job = $1 AND session = $2 AND slot = $3 AND invocation = $4 AND finished_at IS NULL
    AND (claimed_by = session_user OR claimed_by IS NULL);
    IF FOUND THEN
        RETURN 'run';
    END IF;
    UPDATE mt_refusals SET result = $5, fields = mt_refusals.fields || $6 WHERE id = (
        SELECT max(id) FROM mt_refusals WHERE job = $1 AND session = $2 AND slot = $3 AND
        invocation = $4 AND result IS NULL AND (noted_by = session_user OR noted_by IS NULL));
    IF FOUND THEN
        RETURN 'refusal';
    END IF;
    RETURN NULL;
END $$"""),
    ("mt_take_ticket(text, text, text)", """
RETURNS text LANGUAGE sql {definer} AS $$
    DELETE FROM mt_tickets WHERE nonce = $1 AND job = $2 AND session = $3 RETURNING fields $$"""),
    ("mt_write_ticket(text, text, text, text)", """
RETURNS void LANGUAGE sql {definer} AS $$
    INSERT INTO mt_tickets (nonce, job, session, fields) VALUES ($1, $2, $3, $4) $$"""),
    # The group's session advisory lock, taken on the caller's connection (a session lock
    # belongs to the backend, whoever's function took it), and its fence row.
    ("mt_lock(text, text, text, text)", """
RETURNS bigint LANGUAGE plpgsql {definer} AS $$
DECLARE f bigint;
BEGIN
    IF NOT pg_try_advisory_lock(hashtextextended('{namespace}' || $1, 0)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO mt_locks (grp, fence, node, job, session, backend_pid)
    VALUES ($1, nextval('mt_fence'), $2, $3, $4, pg_backend_pid())
    ON CONFLICT (grp) DO UPDATE SET fence = excluded.fence, node = excluded.node,
        job = excluded.job, session = excluded.session, backend_pid = excluded.backend_pid,
        since = now()
    RETURNING fence INTO f;
    RETURN f;
END $$"""),
    ("mt_lock_holder(text)", """
RETURNS TABLE (node text, job text, session text, since timestamptz, fence bigint)
LANGUAGE sql STABLE {definer} AS $$
    SELECT node, job, session, since, fence FROM mt_locks WHERE grp = $1 $$"""),
    # Current while the row names this token and its backend still holds the group's lock
    # (pg_locks: a bigint advisory key is classid (high 32 bits), objid (low), objsubid 1).
    ("mt_check_fence(text, bigint)", """
RETURNS boolean LANGUAGE sql STABLE {definer} AS $$
    SELECT EXISTS (SELECT 1 FROM mt_locks l JOIN pg_locks k ON k.pid = l.backend_pid
        AND k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
        AND ((k.classid::bigint << 32) | k.objid::bigint) =
            hashtextextended('{namespace}' || $1, 0)
        WHERE l.grp = $1 AND l.fence = $2) $$"""),
    ("mt_seen(text, text)", """
RETURNS void LANGUAGE sql {definer} AS $$
    INSERT INTO mt_nodes (node, last_seen, what) VALUES ($1, now(), $2)
    ON CONFLICT (node) DO UPDATE SET last_seen = now(), what = $2 $$"""),
    ("mt_note_miss(text, text, text, text)", """
RETURNS boolean LANGUAGE sql {definer} AS $$
    WITH noted AS (INSERT INTO mt_misses (job, session, slot, node) VALUES ($1, $2, $3, $4)
        ON CONFLICT DO NOTHING RETURNING 1)
    SELECT count(*) > 0 FROM noted $$"""),
    ("mt_attempts(text, text, text)", """
RETURNS TABLE (fields text, node text, fence bigint) LANGUAGE sql STABLE {definer} AS $$
    SELECT fields, node, fence FROM mt_runs WHERE job = $1 AND session = $2 AND slot = $3
    ORDER BY attempt $$"""),
    ("mt_refusals_of(text, text, text)", """
RETURNS TABLE (fields text, node text) LANGUAGE sql STABLE {definer} AS $$
    SELECT fields, node FROM mt_refusals WHERE job = $1 AND session = $2 AND slot = $3
    ORDER BY id $$"""),
    ("mt_keys(text)", """
RETURNS TABLE (job text, session text, slot text) LANGUAGE sql STABLE {definer} AS $$
    SELECT DISTINCT job, session, slot FROM (SELECT job, session, slot FROM mt_runs
        UNION SELECT job, session, slot FROM mt_refusals) k
    WHERE $1 IS NULL OR job = $1 ORDER BY 1, 2, 3 $$"""),
    ("mt_node_list()", """
RETURNS TABLE (node text, last_seen timestamptz, what text) LANGUAGE sql STABLE {definer} AS $$
    SELECT node, last_seen, what FROM mt_nodes ORDER BY node $$"""),
    ("mt_recent_runs(integer)", """
RETURNS TABLE (job text, session text, slot text, attempt integer, how text, node text,
               claimed_at timestamptz, finished_at timestamptz, result text)
LANGUAGE sql STABLE {definer} AS $$
    SELECT job, session, slot, attempt, how, node, claimed_at, finished_at, result
    FROM mt_runs ORDER BY claimed_at DESC LIMIT $1 $$"""),
    # Pauses (`market-timers pause`, pause_on_failure; ledger/pauses.py): one row per scope
    # ("job", "group", or "failure": a group's pause after a failure) and name, for every node.
    ("mt_pause(text, text, text)", """
RETURNS void LANGUAGE sql {definer} AS $$
    INSERT INTO mt_pauses (scope, name, fields, set_by) VALUES ($1, $2, $3, session_user)
    ON CONFLICT (scope, name) DO UPDATE SET fields = excluded.fields, since = now(),
        set_by = session_user $$"""),
    ("mt_unpause(text, text)", """
RETURNS integer LANGUAGE sql {definer} AS $$
    WITH gone AS (DELETE FROM mt_pauses WHERE scope = $1 AND name = $2 RETURNING 1)
    SELECT count(*)::integer FROM gone $$"""),
    ("mt_pauses_of(text, text)", """
RETURNS TABLE (scope text, name text, fields text) LANGUAGE sql STABLE {definer} AS $$
    SELECT scope, name, fields FROM mt_pauses WHERE (scope = 'job' AND name = $1)
    OR (scope IN ('group', 'failure') AND name = $2) ORDER BY scope DESC $$"""),
    ("mt_pause_list()", """
RETURNS TABLE (scope text, name text, fields text) LANGUAGE sql STABLE {definer} AS $$
    SELECT scope, name, fields FROM mt_pauses ORDER BY scope DESC, name $$"""),
    # Halts (`market-timers halt`, the kill switch; ledger/halts.py): one row per scope
    # ("orders", "all", "group", "job") and name; each change is notified on HALT_CHANNEL, which
    # every node's `market-timers halt-watch` listens to (it stops the runs a halt covers).
    # mt_halt returns true only for the call that wrote the row: that node runs on_halt and
    # alerts, once in the cluster.
    ("mt_halt(text, text, text)", """
RETURNS boolean LANGUAGE plpgsql {definer} AS $$
DECLARE written boolean;
BEGIN
    INSERT INTO mt_halts (scope, name, fields, set_by) VALUES ($1, $2, $3, session_user)
    ON CONFLICT DO NOTHING;
    written := FOUND;
    PERFORM pg_notify('{channel}', 'halt ' || $1 || ' ' || $2);
    RETURN written;
END $$"""),
    ("mt_unhalt(text, text)", """
RETURNS integer LANGUAGE plpgsql {definer} AS $$
DECLARE gone integer;
BEGIN
    DELETE FROM mt_halts WHERE scope = $1 AND name = $2;
    GET DIAGNOSTICS gone = ROW_COUNT;
    PERFORM pg_notify('{channel}', 'resume ' || $1 || ' ' || $2);
    RETURN gone;
END $$"""),
    ("mt_halt_list()", """
RETURNS TABLE (scope text, name text, fields text) LANGUAGE sql STABLE {definer} AS $$
    SELECT scope, name, fields FROM mt_halts ORDER BY since $$"""),
    ("mt_schema_version()", """
RETURNS integer LANGUAGE sql STABLE {definer} AS $$
    SELECT max(version) FROM mt_schema $$"""),
)
TABLES = ("mt_schema", "mt_nodes", "mt_runs", "mt_refusals", "mt_tickets", "mt_locks",
          "mt_misses", "mt_pauses", "mt_halts")
SEQUENCES = ("mt_fence", "mt_refusals_id_seq")


def _v2(schema: str) -> list[str]:
    return [
        "ALTER TABLE mt_runs ADD COLUMN claimed_by text",
        "ALTER TABLE mt_refusals ADD COLUMN noted_by text",
        # the fence check asks pg_locks whether the holder's backend still holds the lock
        # (backend_start is visible to the backend's own role only, not to the owner's
        # functions); kept, nullable, for a runner of version 1 until its node is upgraded
        "ALTER TABLE mt_locks ALTER COLUMN backend_start DROP NOT NULL",
    ]


def _v3(schema: str) -> list[str]:
    """Pauses for every node (a pause that held one node would let the standby run the job)."""
    return ["""CREATE TABLE mt_pauses (
        scope text NOT NULL CHECK (scope IN ('job', 'group', 'failure')),
        name text NOT NULL,
        fields text NOT NULL,
        since timestamptz NOT NULL DEFAULT now(),
        set_by text NOT NULL,
        PRIMARY KEY (scope, name))"""]


def _v4(schema: str) -> list[str]:
    """Halts for every node (the kill switch: a halt made on one node holds on all)."""
    return ["""CREATE TABLE mt_halts (
        scope text NOT NULL CHECK (scope IN ('orders', 'all', 'group', 'job')),
        name text NOT NULL DEFAULT '',
        fields text NOT NULL,
        since timestamptz NOT NULL DEFAULT now(),
        set_by text NOT NULL,
        PRIMARY KEY (scope, name))"""]


def _v5(schema: str) -> list[str]:
    """Each node's clock skew as its last claim measured it (see the module doc)."""
    return ["ALTER TABLE mt_nodes ADD COLUMN IF NOT EXISTS clock_skew_ms integer, "
            "ADD COLUMN IF NOT EXISTS clock_checked_at timestamptz"]


def _functions(schema: str) -> list[str]:
    """Every function, (re)created by each init after the migrations: the tables they read
    exist by then (a LANGUAGE sql body is checked against them when it is created)."""
    definer = _DEFINER.format(schema=quote_ident(schema))
    namespace = LOCK_NAMESPACE.replace("'", "''")
    return [f"CREATE OR REPLACE FUNCTION {signature} "
            + body.replace("{definer}", definer).replace("{namespace}", namespace)
            .replace("{channel}", HALT_CHANNEL)
            for signature, body in FUNCTIONS]


# (version, statements of the ledger's schema `schema`), applied in order by init_schema.
MIGRATIONS = [
    (1, lambda schema: [s.strip() for s in V1.split(";") if s.strip()]),
    (2, _v2),
    (3, _v3),
    (4, _v4),
    (5, _v5),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def connect(dsn: str, deadline: float | None = None) -> Connection:
    """A connection with the session settings above (Unreachable when no host answers); with a
    deadline (time.time()), connect_timeout is at most what is left of it (libpq's minimum: 2 s
    a host)."""
    if not has_param(dsn, "connect_timeout"):
        timeout = CONNECT_TIMEOUT_SEC
        if deadline is not None:
            timeout = max(2, min(timeout, int(deadline - time.time() + 0.999)))
        dsn = with_param(dsn, "connect_timeout", str(timeout))
    dsn = with_defaults(dsn, CLIENT_SETTINGS)
    tag = None
    if not has_param(dsn, "application_name"):  # names this connection's backend (withdraw)
        tag = f"market-timers {os.getpid()} {os.urandom(6).hex()}"
        dsn = with_param(dsn, "application_name", tag)
    in_startup = not has_param(dsn, "options")  # the DSN's own `options` wins; then SET them
    if in_startup:
        dsn = with_param(dsn, "options", " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS))
    conn = Connection(dsn)
    conn.tag = tag
    if not in_startup:
        try:
            for name, value in SESSION_SETTINGS:
                conn.execute(f"SET {name} = {value}", deadline=deadline)
        except DatabaseError:
            conn.close()
            raise
    return conn


def read_dsn(env) -> str:
    """The DSN from the unit's credential (LoadCredential=market-timers.cluster-dsn); in the
    record step, whose credentials systemd does not reliably provide, the start's hand-off."""
    path = env.get(environment.CLUSTER_DSN_FILE) or os.path.join(
        env.get("CREDENTIALS_DIRECTORY") or "/etc/credstore", "market-timers.cluster-dsn")
    try:
        with open(path, encoding="utf-8") as f:
            dsn = f.read().strip()
    except OSError as e:
        handed = _read_hand_off(env)
        if handed:
            return handed
        raise Unreachable(f"cannot read the cluster DSN credential {path}: {e.strerror}") from None
    if not dsn:
        raise Unreachable(f"the cluster DSN credential {path} is empty")
    return dsn


# The DSN handed from a start to its own record step. systemd gives a unit's credentials to
# ExecStart=; to ExecStopPost= not reliably: under ProtectSystem=strict with ReadWritePaths= (every
# job unit), systemd 252 leaves /run/credentials/<unit> unreadable there most of the time
# (Permission denied in 12 of 15 stops of a probe unit on booted Debian 12; systemd issue 32583).
# Without the DSN the record step could not finish the run in the cluster ledger (status, a
# downstream's `requires` and pause_on_failure then saw it still running). So the start writes
# it to <runtime dir>/ledger-dsn/<INVOCATION_ID>: the runner's user's 0700 directory, the file
# 0600 (the job, another user, cannot read it), and the record step removes it.
HAND_OFF_DIR = "ledger-dsn"


def _hand_off_path(env) -> str | None:
    invocation = env.get("INVOCATION_ID") or ""
    if not invocation.isalnum():
        return None
    return os.path.join(env.get(environment.LOCK_DIR) or environment.DEFAULT_RUNTIME_DIR,
                        HAND_OFF_DIR, invocation)


def hand_off_dsn(env, dsn: str) -> None:
    """The start: leave the DSN for this invocation's record step (best effort)."""
    path = _hand_off_path(env)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        st = os.lstat(os.path.dirname(path))
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return  # not this user's own private directory: hand nothing over
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, dsn.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _read_hand_off(env) -> str | None:
    path = _hand_off_path(env)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode("utf-8", "replace").strip() or None
    finally:
        os.close(fd)


def drop_hand_off(env) -> None:
    """The record step, done: the DSN it was handed is removed."""
    path = _hand_off_path(env)
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def init_schema(conn: Connection, node_roles=()) -> tuple[int, int]:
    """Create or migrate the schema, then grant EXECUTE on the ledger's functions to each of
    `node_roles` and revoke every table right (from PUBLIC and from them); (version before,
    version after). Idempotent; run as the owner role, which owns the tables and functions."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock($1)", INIT_LOCK)
        conn.execute("CREATE TABLE IF NOT EXISTS mt_schema (version integer NOT NULL)")
        rows = conn.execute("SELECT version FROM mt_schema")
        before = int(rows[0][0]) if rows else 0
        if not rows:
            conn.execute("INSERT INTO mt_schema VALUES (0)")
        if before > SCHEMA_VERSION:
            raise DatabaseError(f"the ledger's schema is version {before}, newer than this "
                                f"market-timers knows ({SCHEMA_VERSION}): upgrade the package")
        schema = conn.execute("SELECT current_schema()")[0][0]
        for version, statements in MIGRATIONS:
            if version > before:
                for statement in statements(schema):
                    conn.execute(statement)
                conn.execute("UPDATE mt_schema SET version = $1", version)
        for statement in _functions(schema):
            conn.execute(statement)
        _grant(conn, schema, list(node_roles))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return before, max(before, SCHEMA_VERSION)


def _grant(conn: Connection, schema: str, roles: list[str]) -> None:
    """EXECUTE on the functions to `roles`, nothing on the tables to anyone but the owner."""
    owner = conn.execute("SELECT current_user")[0][0]
    for role in roles:
        rows = conn.execute("SELECT rolsuper OR rolbypassrls, pg_has_role($1, 'pg_signal_backend',"
                            " 'MEMBER') FROM pg_roles WHERE rolname = $1", role)
        if not rows:
            raise DatabaseError(f"node role {role!r} does not exist: create it first (CREATE "
                                f"ROLE {role} LOGIN PASSWORD '...'), one per node")
        if role == owner:
            raise DatabaseError(f"node role {role!r} is the owner role running `cluster init`: "
                                "the owner has every table right; give the nodes their own roles")
        if rows[0][0] == "t" or rows[0][1] == "t":
            raise DatabaseError(f"node role {role!r} is a superuser, bypasses row security or "
                                "may signal any backend (pg_signal_backend): a node role must "
                                "not")
        for other in roles:
            if other != role and conn.execute("SELECT pg_has_role($1, $2, 'MEMBER')",
                                              role, other)[0][0] == "t":
                raise DatabaseError(f"node role {role!r} has the rights of node role {other!r}:"
                                    f" it could end that node's backends (and its lock groups)")
    names = ", ".join(["PUBLIC", *map(quote_ident, roles)])
    conn.execute(f"REVOKE ALL ON TABLE {', '.join(TABLES)} FROM {names}")
    conn.execute(f"REVOKE ALL ON SEQUENCE {', '.join(SEQUENCES)} FROM {names}")
    for signature, _ in FUNCTIONS:
        conn.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        for role in roles:
            conn.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {quote_ident(role)}")
    if schema != "public":
        for role in roles:
            conn.execute(f"GRANT USAGE ON SCHEMA {quote_ident(schema)} TO {quote_ident(role)}")


def schema_version(conn: Connection) -> int:
    rows = conn.execute("SELECT to_regprocedure('mt_schema_version()') IS NOT NULL, "
                        "to_regclass('mt_schema') IS NOT NULL")
    if rows[0][0] == "t":  # version 2 on: a node role reads it through the function
        return int(conn.execute("SELECT mt_schema_version()")[0][0] or 0)
    if rows[0][1] != "t":
        return 0
    rows = conn.execute("SELECT version FROM mt_schema")
    return int(rows[0][0]) if rows else 0


class PostgresLedger(Ledger):
    """The Ledger calls on one connection (opened lazily; `close` when done).

    `deadline` (time.time(), None: none): the runner's start sets it to instant + grace; each
    statement then retries a busy database and reconnects a broken connection until it, and
    raises DeadlinePassed past it (see the module doc)."""

    bounded = withdraws = locks_groups = pauses_everywhere = True  # ledger.Ledger's capabilities

    def __init__(self, dsn: str, node: str):
        self.dsn, self.node = dsn, node
        self._conn: Connection | None = None
        self.deadline: float | None = None
        self.committed = False  # a lock group taken or a claim sent: no reconnect from here on
        self.claim_sent = False  # a claim statement was sent (its answer may have been lost)
        self._tags: list[str] = []  # application_name of each connection it opened
        self.max_clock_skew_ms = 1000  # the runner sets [cluster] max_clock_skew_ms
        self.clock = time.time  # the reading a claim carries (see the module doc)
        self.clock_skew_ms: int | None = None  # as the last claim measured it

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._connect(self.deadline)
        return self._conn

    def _connect(self, deadline: float | None) -> None:
        self._conn = connect(self.dsn, deadline)
        if self._conn.tag:
            self._tags.append(self._conn.tag)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _execute(self, sql: str, *params, deadline: float | None = None) -> list[tuple]:
        """One statement under the start's deadline (or `deadline`), retried while the database
        is busy or the connection broke before anything depended on it."""
        deadline = deadline or self.deadline
        if deadline is None:
            return self._read(sql, *params)
        error = None
        while True:
            try:
                if self._conn is None and time.time() >= deadline:
                    raise TimedOut("the deadline passed before the statement was sent")
                if self._conn is None:
                    self._connect(deadline)
                # a callable parameter is read as the statement is sent (the claim's clock)
                return self._conn.execute(sql, *(p() if callable(p) else p for p in params),
                                          deadline=deadline)
            except Unreachable as e:
                if not self.committed:
                    raise  # no connection could be made: on_db_unreachable decides
                raise ConnectionLost(f"the connection holding this start's lock group or claim "
                                     f"broke and cannot be made again ({e})") from None
            except TimedOut as e:
                self._conn = None  # closed by libpq.py
                reason = f"{e}; before that: {error}" if error else str(e)
                raise DeadlinePassed(f"the cluster ledger did not answer in time ({reason})",
                                     reason) from None
            except ConnectionLost:
                self.close()
                if self.committed:  # the lock died with it, or the claim's outcome is unknown
                    raise
                error = "the connection broke"
            except DatabaseError as e:
                if e.sqlstate not in RETRYABLE:
                    raise _schema_hint(e) from None
                error = f"{e} (SQLSTATE {e.sqlstate}: {RETRYABLE[e.sqlstate]})"
            if time.time() + RETRY_PAUSE_SEC >= deadline:
                raise DeadlinePassed(f"the cluster ledger was busy until the deadline: {error}",
                                     error)
            time.sleep(RETRY_PAUSE_SEC)

    def _read(self, sql: str, *params) -> list[tuple]:
        """A statement of the readers (status, deadman, sync): no deadline, no retry."""
        try:
            return self.conn.execute(sql, *(p() if callable(p) else p for p in params))
        except DatabaseError as e:
            raise _schema_hint(e) from None

    def seen(self, what: str) -> None:
        self._read("SELECT mt_seen($1, $2)", self.node, what)

    # -- the runner's calls ------------------------------------------------------------------

    def _past_deadline(self) -> float | None:
        """The bound of a step that decides nothing (AFTER_DEADLINE_SEC)."""
        return self.deadline and max(self.deadline, time.time() + AFTER_DEADLINE_SEC)

    def holder(self, key: Key) -> dict | None:
        rows = self._execute("SELECT * FROM mt_holder($1, $2, $3)", key.job, key.session,
                             key.slot, deadline=self._past_deadline())
        return _record(rows[0]) if rows else None

    def claim(self, key: Key, how: str, fields: dict) -> Claim:
        fields = dict(fields, host=self.node, node=self.node)  # the node is the cluster's name
        if how in ("timer", "operator"):
            attempts = [1]
        else:
            rows = self._execute("SELECT * FROM mt_last_attempt($1, $2, $3)", key.job,
                                 key.session, key.slot)
            last = int(rows[0][0]) if rows else 0
            if how == "retry" and (not rows or rows[0][1] in (None, "success")):
                return Claim(False, holder=self.holder(key))
            attempts = range(last + 1, last + 100)
        for attempt in attempts:
            text = format_fields({"job": key.job, "session": key.session,
                                  "slot": key.slot or None, "attempt": attempt, "how": how,
                                  **fields})
            # One round trip: the claim, the clock check, and this node's "last seen".
            self.committed = self.claim_sent = True  # its outcome is known from its answer only
            fence = self._claim_checked(key, attempt, how, fields.get("invocation"), text)
            if fence is not None:
                return Claim(True, attempt, fence=fence)
            if how in ("timer", "operator"):
                holder = self.holder(key) or {}
                if fields.get("invocation") and holder.get("invocation") == \
                        fields["invocation"] and holder.get("node") == self.node:
                    # this very start's claim, written by a statement whose answer was lost
                    return Claim(True, 1, fence=holder.get("fence"))
                return Claim(False, holder=holder)
        raise DatabaseError(f"no free attempt number for {key!r}")

    def _claim_checked(self, key: Key, attempt: int, how: str, invocation, text: str):
        """mt_claim with this node's clock reading: the fence, or None (another holds the key);
        ClockSkewed when the ledger refused the reading and its round trip does not explain
        the skew (see the module doc)."""
        bound = self.max_clock_skew_ms
        sent: list[float] = []

        def reading() -> str:  # taken as the statement is sent, each time it is sent
            sent.append(self.clock())
            return repr(sent[-1])

        for _ in range(CLAIM_RESENDS + 1):
            rows = self._execute(
                "SELECT * FROM mt_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", key.job,
                key.session, key.slot, attempt, how, self.node, invocation, text,
                f"ran {key.job} {key.name}", reading, bound)
            received = time.time()
            fence, skew, refused = rows[0]
            self.clock_skew_ms = int(skew)
            if refused != "t":
                return fence
            ledger_at = sent[-1] + self.clock_skew_ms / 1000
            if self.clock_skew_ms < 0 or ledger_at > received + bound / 1000:
                raise ClockSkewed(self.clock_skew_ms, bound)
            # the statement was held up on its way: the clock may be right; once more
            if self.deadline is not None and time.time() + RETRY_PAUSE_SEC >= self.deadline:
                break
        why = (f"each claim took more than max_clock_skew_ms = {bound} to reach the ledger (last "
               f"{self.clock_skew_ms} ms), so this node's clock could not be checked")
        raise DeadlinePassed(f"the cluster ledger could not check this node's clock: {why}", why)

    def refuse(self, key: Key, fields: dict) -> None:
        """The refusal's note (the deadman reads it), given AFTER_DEADLINE_SEC past the
        start's deadline."""
        self._execute(
            "SELECT mt_refuse($1, $2, $3, $4, $5, $6)", key.job, key.session, key.slot, self.node,
            fields.get("invocation"),
            format_fields({"job": key.job, "session": key.session, "slot": key.slot or None,
                           "node": self.node, **fields}), deadline=self._past_deadline())

    def withdraw(self, key: Key, invocation: str | None, fence: str | None = None) -> bool:
        """Take back this start's claim, which will not run (it completed past the deadline, or
        its answer never came), so that the session stays runnable once: on a new connection,
        given AFTER_DEADLINE_SEC from now. True when no claim of this start is left."""
        if invocation is None and fence is None:
            return False
        self.close()
        self.committed = False
        budget = time.time() + AFTER_DEADLINE_SEC
        try:
            # first end the backend of the claim (its statement could still commit otherwise):
            # found by this process's random application_name, so never another node's
            self._execute("SELECT pg_terminate_backend(pid, 2000) FROM pg_stat_activity "
                          "WHERE application_name = ANY($1::text[]) AND pid <> pg_backend_pid()",
                          "{" + ",".join(f'"{t}"' for t in self._tags) + "}", deadline=budget)
            self._execute(
                "SELECT mt_withdraw($1, $2, $3, $4, $5, $6)", key.job, key.session, key.slot, self.node,
                invocation, fence, deadline=budget)
        except DatabaseError:
            return False
        return True

    def finish(self, key: Key, invocation: str | None, fields: dict) -> None:
        text = format_fields(fields)
        rows = self._execute(
            "SELECT mt_finish($1, $2, $3, $4, $5, $6)",
            key.job, key.session, key.slot, invocation, fields.get("result"), text)
        if rows[0][0] is None:  # the runner stopped before it wrote anything
            status = str(fields.get("exit_status") or "")
            self.refuse(key, dict(fields, invocation=invocation,
                                  refused="runner-error" if status == "175" or status == "172"
                                  else "unrecorded"))

    def take_ticket(self, nonce: str, key: Key) -> dict | None:
        rows = self._execute("SELECT mt_take_ticket($1, $2, $3)", nonce, key.job, key.session)
        return parse_fields(rows[0][0]) if rows[0][0] is not None else None

    def write_ticket(self, nonce: str, fields: dict, owner=None) -> None:
        self._execute("SELECT mt_write_ticket($1, $2, $3, $4)", nonce, fields.get("job"), fields.get("session"),
                          format_fields(fields))

    # -- cluster-wide lock groups and fencing --------------------------------------------------

    def lock_group(self, group: str, key: Key) -> tuple[int, str] | None:
        """Take the group's advisory lock: (socket fd to inherit, fence token), or None (busy)."""
        # One statement, the lock and its fence row: when its connection breaks, the lock (if
        # taken) dies with it, so it may be retried on a new one.
        rows = self._execute("SELECT mt_lock($1, $2, $3, $4)", group, self.node, key.job,
                             key.name)
        if rows[0][0] is None:
            return None
        self.committed = True  # the lock lives on this connection: it must not be replaced
        return self.conn.socket(), rows[0][0]

    def lock_holder(self, group: str) -> dict | None:
        rows = self._execute("SELECT * FROM mt_lock_holder($1)", group)
        if not rows:
            return None
        node, job, session, since, fence = rows[0]
        return {"node": node, "job": job, "session": session, "since": since, "fence": fence}

    def check_fence(self, group: str, token: str) -> bool:
        """True while `token` is the group's current fence and its holder's session lives."""
        rows = self._execute("SELECT mt_check_fence($1, $2)", group, token)
        return rows[0][0] == "t"

    # -- pauses (ledger/pauses.py) -------------------------------------------------------------

    def pauses_of(self, job: str, group: str) -> list[tuple[str, str, dict]]:
        """The runner's check: the cluster's pauses of the job and of its lock group, as
        (scope, name, record); a read, given AFTER_DEADLINE_SEC like the peek, so that a late
        start still says "paused" rather than "stale"."""
        rows = self._execute("SELECT * FROM mt_pauses_of($1, $2)", job, group,
                             deadline=self._past_deadline())
        return [(scope, name, parse_fields(fields)) for scope, name, fields in rows]

    def pause_list(self) -> list[tuple[str, str, dict]]:
        rows = self._read("SELECT * FROM mt_pause_list()")
        return [(scope, name, parse_fields(fields)) for scope, name, fields in rows]

    def set_pause(self, scope: str, name: str, fields: dict) -> None:
        self._execute("SELECT mt_pause($1, $2, $3)", scope, name, format_fields(fields))

    def unpause(self, scope: str, name: str) -> bool:
        """True when that pause was in the ledger (and now is not)."""
        rows = self._execute("SELECT mt_unpause($1, $2)", scope, name)
        return int(rows[0][0] or 0) > 0

    # -- halts (ledger/halts.py) ---------------------------------------------------------------

    def halt_list(self) -> list[tuple[str, str, dict]]:
        """Every halt in force, as (scope, name, record); on a start, a read given
        AFTER_DEADLINE_SEC like the peek (a late start still says "halted")."""
        rows = self._execute("SELECT * FROM mt_halt_list()", deadline=self._past_deadline())
        return [(scope, name, parse_fields(fields)) for scope, name, fields in rows]

    def set_halt(self, scope: str, name: str, fields: dict) -> bool:
        """True for the one call that wrote the halt (a scope already halted: False)."""
        rows = self._execute("SELECT mt_halt($1, $2, $3)", scope, name, format_fields(fields))
        return rows[0][0] == "t"

    def unhalt(self, scope: str, name: str) -> bool:
        rows = self._execute("SELECT mt_unhalt($1, $2)", scope, name)
        return int(rows[0][0] or 0) > 0

    # -- readers -----------------------------------------------------------------------------

    def attempts(self, key: Key) -> list[dict]:
        rows = self._read("SELECT * FROM mt_attempts($1, $2, $3)", key.job,
                                 key.session, key.slot)
        return [_record(r) for r in rows]

    def refusals(self, key: Key) -> list[dict]:
        rows = self._read("SELECT fields, node, NULL FROM mt_refusals_of($1, $2, $3)",
                                 key.job, key.session, key.slot)
        return [_record(r) for r in rows]

    def keys(self, job: str | None = None) -> list[Key]:
        rows = self._read("SELECT * FROM mt_keys($1)", job)
        return [Key(*r) for r in rows]

    def note_miss(self, key: Key) -> bool:
        """True for the one node that reports this miss first (cluster-wide dedup)."""
        rows = self._read("SELECT mt_note_miss($1, $2, $3, $4)", key.job, key.session,
                                 key.slot, self.node)
        return rows[0][0] == "t"

    def nodes(self) -> list[dict]:
        """Each node: last seen, what it did, and its clock skew as its last claim measured it
        (the ledger's clock minus the node's, ms; None before its first claim)."""
        rows = self._read("SELECT * FROM mt_node_list()")
        clocks = {n: (None if skew is None else int(skew), at)
                  for n, skew, at in self._read("SELECT * FROM mt_node_clocks()")}
        return [{"node": n, "last_seen": s, "what": w,
                 "clock_skew_ms": clocks.get(n, (None, None))[0],
                 "clock_checked_at": clocks.get(n, (None, None))[1]} for n, s, w in rows]

    def runs(self, limit: int = 200) -> list[dict]:
        rows = self._read("SELECT * FROM mt_recent_runs($1)", limit)
        names = ("job", "session", "slot", "attempt", "how", "node", "claimed_at", "finished_at",
                 "result")
        return [dict(zip(names, r, strict=True)) for r in rows]


def _schema_hint(e: DatabaseError) -> DatabaseError:
    """A missing ledger function (SQLSTATE 42883) means a schema older than this code."""
    if e.sqlstate == "42883" and "mt_" in str(e):
        return DatabaseError(f"{e}: the ledger's schema is older than this market-timers "
                             f"(version {SCHEMA_VERSION}): run `market-timers cluster init` with "
                             "the owner role's DSN", e.sqlstate)
    return e


def _record(row: tuple) -> dict:
    fields, node, fence = row
    record = parse_fields(fields)
    record.setdefault("node", node)
    if fence is not None:
        record.setdefault("fence", fence)
    return record


__all__ = ["PostgresLedger", "connect", "init_schema", "read_dsn", "UNIQUE_VIOLATION",
           "Unreachable", "DatabaseError", "HOLDER_DEATH_BOUND_SEC"]
