"""`market-timers cluster check`: what makes the cluster ledger unsafe, found from one DSN.

Two findings (issue 44). A schema that PUBLIC or a node role may create objects in: a node
could plant a function the ledger's SECURITY DEFINER functions run as the owner (pgschema.py).
And a failover that can lose claims: with a DSN naming several hosts (a primary and standbys,
target_session_attrs=read-write) on a PostgreSQL whose commits do not wait for a synchronous
standby (synchronous_standby_names empty, or synchronous_commit off or local, PostgreSQL's
defaults), a claim committed on the primary may be missing on the promoted standby, and the
other node claims and runs the same session again.
"""

from __future__ import annotations

from market_timers.ledger.conninfo import is_uri, keyword_pairs, uri_pairs
from market_timers.ledger.libpq import Connection
from market_timers.ledger.pgschema import schema_creators

# synchronous_commit values whose commit waits for a synchronous standby's confirmation
DURABLE_COMMITS = ("on", "remote_write", "remote_apply")


def several_hosts(dsn: str) -> bool:
    pairs = uri_pairs(dsn)[0] if is_uri(dsn) else keyword_pairs(dsn)[0]
    return any(key in ("host", "hostaddr") and "," in value for key, value in pairs)


def findings(conn: Connection, dsn: str) -> tuple[list[str], list[str]]:
    """(what is safe, what is not), each a sentence for the administrator."""
    good, bad = [], []
    rows = conn.execute(
        "SELECT n.nspname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = "
        "p.pronamespace WHERE p.proname = 'mt_claim' LIMIT 1")
    if not rows:
        return good, ["no ledger schema here: run `market-timers cluster init`"]
    schema = rows[0][0]
    roles = [r for (r,) in conn.execute(
        "SELECT DISTINCT pg_catalog.pg_get_userbyid(a.grantee) FROM pg_catalog.pg_proc p, "
        "pg_catalog.aclexplode(p.proacl) a WHERE p.proname = 'mt_claim' AND a.grantee <> 0 "
        "AND a.grantee <> p.proowner ORDER BY 1")]
    creators = schema_creators(conn, schema, roles)
    if creators:
        bad.append(f"{' and '.join(creators)} may CREATE objects in the ledger's schema "
                   f"{schema!r}: a node could plant a function the ledger's functions run as "
                   "the owner; run `market-timers cluster init` as the schema's owner, or "
                   f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC (and from those roles)")
    else:
        good.append(f"no one but the owner may create objects in the ledger's schema {schema!r}"
                    f" (node roles: {', '.join(roles) or 'none yet'})")
    names = conn.execute("SELECT pg_catalog.current_setting('synchronous_standby_names')")[0][0]
    commit = conn.execute("SELECT pg_catalog.current_setting('synchronous_commit')")[0][0]
    if not several_hosts(dsn):
        good.append("the DSN names one host: no failover of the database is in play")
    elif names.strip() and commit in DURABLE_COMMITS:
        good.append(f"each commit waits for a synchronous standby (synchronous_standby_names = "
                    f"{names!r}, synchronous_commit = {commit}): a promoted standby has every "
                    "claim")
    else:
        bad.append(f"the DSN names several hosts, but a commit does not wait for a standby "
                   f"(synchronous_standby_names = {names!r}, synchronous_commit = {commit}): "
                   "after a failover a claim may be missing on the promoted standby and the "
                   "session run twice; set synchronous_standby_names and synchronous_commit = "
                   "on (or remote_apply)")
    return good, bad
