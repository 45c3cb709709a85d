"""The cluster ledger's schema in PostgreSQL: its tables, their migrations, and `market-timers
cluster init` (init_schema), which creates or migrates them and grants the node roles.

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

Nothing can be planted beside the tables (issue 44): each init takes CREATE on the schema from
PUBLIC and the node roles, and refuses a schema where one of them may still create (a right
granted through a group role, or by a role other than the owner); the functions call the
built-ins as pg_catalog's (pgfunctions.py).

Schema: versioned in mt_schema, created or migrated by `market-timers cluster init` (MIGRATIONS:
version 1 the tables, version 2 the claiming role's columns, version 3 the pauses, version 4 the
halts, version 5 the nodes' clock skew (and mt_claim's signature with the clock reading: the
version-4 signature is kept, without the check, so that a node not yet upgraded still claims
during a rolling upgrade; upgrade the schema first, then the nodes); the functions
are (re)created by every init after the migrations; idempotent,
serialised by a transaction-level advisory lock, one transaction: a failed init changes nothing).
"""

from __future__ import annotations

from market_timers.ledger import DatabaseError
from market_timers.ledger.libpq import Connection
from market_timers.ledger.pgfunctions import FUNCTIONS, create_functions, quote_ident

INIT_LOCK = 7305210  # pg_advisory_xact_lock key serialising `cluster init`
# What lifts the kill switch or a pause: the operator role's only (issue 44). Every process of
# the package's user can read a node's DSN; a node role may still halt or pause (the record
# step writes the failure pause): it can stop jobs, never let a halted one run.
OPERATOR_ONLY = ("mt_unhalt(text, text)", "mt_unpause(text, text)")

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


# (version, statements of the ledger's schema `schema`), applied in order by init_schema.
MIGRATIONS = [
    (1, lambda schema: [s.strip() for s in V1.split(";") if s.strip()]),
    (2, _v2),
    (3, _v3),
    (4, _v4),
    (5, _v5),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]

def init_schema(conn: Connection, node_roles=(), operator_roles=()) -> tuple[int, int]:
    """Create or migrate the schema, then grant EXECUTE on the ledger's functions to each of
    `node_roles` (but OPERATOR_ONLY) and `operator_roles` (all), and revoke every table right
    (from PUBLIC and from them); (version before, version after). Idempotent; run as the owner
    role, which owns the tables and functions."""
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
        for statement in create_functions(schema):
            conn.execute(statement)
        _grant(conn, schema, list(node_roles), list(operator_roles))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return before, max(before, SCHEMA_VERSION)


def _grant(conn: Connection, schema: str, roles: list[str], operators: list[str]) -> None:
    """EXECUTE on the functions to `roles` (but OPERATOR_ONLY) and `operators`, nothing on the
    tables to anyone but the owner."""
    owner = conn.execute("SELECT current_user")[0][0]
    for role in operators:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = $1", role):
            raise DatabaseError(f"operator role {role!r} does not exist: create it first "
                                f"(CREATE ROLE {role} LOGIN PASSWORD '...')")
        if role == owner or role in roles:
            raise DatabaseError(f"operator role {role!r} is the owner role or a node role: "
                                "give the operator a role of its own")
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
    names = ", ".join(["PUBLIC", *map(quote_ident, roles + operators)])
    conn.execute(f"REVOKE ALL ON TABLE {', '.join(TABLES)} FROM {names}")
    conn.execute(f"REVOKE ALL ON SEQUENCE {', '.join(SEQUENCES)} FROM {names}")
    for signature, _ in FUNCTIONS:
        conn.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        for role in roles + operators:
            right = "REVOKE ALL" if signature in OPERATOR_ONLY and role in roles else \
                "GRANT EXECUTE"
            conn.execute(f"{right} ON FUNCTION {signature} "
                         f"{'FROM' if right.startswith('REVOKE') else 'TO'} {quote_ident(role)}")
    if schema != "public":
        for role in roles + operators:
            conn.execute(f"GRANT USAGE ON SCHEMA {quote_ident(schema)} TO {quote_ident(role)}")
    conn.execute(f"REVOKE CREATE ON SCHEMA {quote_ident(schema)} FROM {names}")
    creators = schema_creators(conn, schema, roles + operators)
    if creators:
        raise DatabaseError(
            f"the ledger's schema {schema!r} lets {' and '.join(creators)} CREATE objects in "
            "it, which init could not take back (granted by another role, or through a group "
            "role): a node could plant a function that the ledger's functions run as the "
            f"owner. As the schema's owner: REVOKE CREATE ON SCHEMA {quote_ident(schema)} FROM "
            "PUBLIC (and from the group roles the node roles are members of)", "42501")


def schema_creators(conn: Connection, schema: str, roles) -> list[str]:
    """Who of PUBLIC and `roles` may CREATE in `schema` (issue 44: none may)."""
    rows = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode("
        "COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a WHERE n.nspname = $1 "
        "AND a.grantee = 0 AND a.privilege_type = 'CREATE')", schema)
    found = ["PUBLIC"] if rows[0][0] == "t" else []
    for role in roles:
        if conn.execute("SELECT pg_catalog.has_schema_privilege($1, $2, 'CREATE')", role,
                        schema)[0][0] == "t":
            found.append(f"role {role}")
    return found


def schema_version(conn: Connection) -> int:
    rows = conn.execute("SELECT to_regprocedure('mt_schema_version()') IS NOT NULL, "
                        "to_regclass('mt_schema') IS NOT NULL")
    if rows[0][0] == "t":  # version 2 on: a node role reads it through the function
        return int(conn.execute("SELECT mt_schema_version()")[0][0] or 0)
    if rows[0][1] != "t":
        return 0
    rows = conn.execute("SELECT version FROM mt_schema")
    return int(rows[0][0]) if rows else 0
