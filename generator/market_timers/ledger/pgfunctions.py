"""The cluster ledger's functions in PostgreSQL: every call of the runner and of the readers is
one of them (FUNCTIONS), SECURITY DEFINER with search_path pinned, so that a node's role needs
EXECUTE on them and no table right at all (pgschema.py grants them; postgresql.py calls them).
"""

from __future__ import annotations

LOCK_NAMESPACE = "market-timers lock group "
HALT_CHANNEL = "market_timers_halt"  # NOTIFY channel of every halt and resume


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# Every function runs as its owner (the role that ran `cluster init`) with search_path pinned to
# the ledger's schema ({schema}), pg_temp last: a caller's objects are never resolved in it.
# The built-ins are called as pg_catalog's, with their exact argument types (issue 44: a
# public.hashtextextended(text, integer), a better match for a literal 0 than pg_catalog's
# (text, bigint), ran as the owner); and init takes CREATE on the schema from everyone but the
# owner (pgschema.py), so nothing can be planted beside the tables.
_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp"
FUNCTIONS = (
    ("mt_claim(text, text, text, integer, text, text, text, text, text)", """
RETURNS bigint LANGUAGE plpgsql {definer} AS $$
DECLARE f bigint;
BEGIN
    INSERT INTO mt_runs (job, session, slot, attempt, how, node, fence, invocation, fields,
                         claimed_by)
    VALUES ($1, $2, $3, $4, $5, $6, pg_catalog.nextval('mt_fence'), $7, $8, session_user)
    ON CONFLICT DO NOTHING RETURNING fence INTO f;
    IF f IS NOT NULL THEN
        INSERT INTO mt_nodes (node, last_seen, what) VALUES ($6, pg_catalog.now(), $9)
        ON CONFLICT (node) DO UPDATE SET last_seen = pg_catalog.now(), what = $9;
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
    skew := pg_catalog.round((extract(epoch FROM pg_catalog.clock_timestamp()) - $10) * 1000);
    IF pg_catalog.abs(skew) <= $11 THEN
        INSERT INTO mt_runs (job, session, slot, attempt, how, node, fence, invocation, fields,
                             claimed_by)
        VALUES ($1, $2, $3, $4, $5, $6, pg_catalog.nextval('mt_fence'), $7, $8, session_user)
        ON CONFLICT DO NOTHING RETURNING fence INTO f;
    END IF;
    IF f IS NOT NULL OR pg_catalog.abs(skew) > $11 THEN  -- a won claim or a refused clock: noted
        INSERT INTO mt_nodes AS n (node, last_seen, what, clock_skew_ms, clock_checked_at)
        VALUES ($6, pg_catalog.now(), CASE WHEN f IS NULL THEN '' ELSE $9 END, skew,
                pg_catalog.now())
        ON CONFLICT (node) DO UPDATE SET last_seen = pg_catalog.now(), clock_skew_ms = skew,
            clock_checked_at = pg_catalog.now(), what = CASE WHEN f IS NULL THEN n.what ELSE $9 END;
    END IF;
    RETURN QUERY SELECT f, skew, pg_catalog.abs(skew) > $11;
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
    SELECT pg_catalog.count(*)::integer FROM gone $$"""),
    ("mt_finish(text, text, text, text, text, text)", """
RETURNS text LANGUAGE plpgsql {definer} AS $$
BEGIN
    UPDATE mt_runs SET finished_at = pg_catalog.now(), result = $5, fields = mt_runs.fields || $6
    WHERE job = $1 AND session = $2 AND slot = $3 AND invocation = $4 AND finished_at IS NULL
    AND (claimed_by = session_user OR claimed_by IS NULL);
    IF FOUND THEN
        RETURN 'run';
    END IF;
    UPDATE mt_refusals SET result = $5, fields = mt_refusals.fields || $6 WHERE id = (
        SELECT pg_catalog.max(id) FROM mt_refusals WHERE job = $1 AND session = $2 AND slot = $3 AND
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
    IF NOT pg_catalog.pg_try_advisory_lock(
            pg_catalog.hashtextextended(('{namespace}' || $1)::text, 0::bigint)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO mt_locks (grp, fence, node, job, session, backend_pid)
    VALUES ($1, pg_catalog.nextval('mt_fence'), $2, $3, $4, pg_catalog.pg_backend_pid())
    ON CONFLICT (grp) DO UPDATE SET fence = excluded.fence, node = excluded.node,
        job = excluded.job, session = excluded.session, backend_pid = excluded.backend_pid,
        since = pg_catalog.now()
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
    SELECT EXISTS (SELECT 1 FROM mt_locks l JOIN pg_catalog.pg_locks k ON k.pid = l.backend_pid
        AND k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
        AND ((k.classid::bigint << 32) | k.objid::bigint) =
            pg_catalog.hashtextextended(('{namespace}' || $1)::text, 0::bigint)
        WHERE l.grp = $1 AND l.fence = $2) $$"""),
    ("mt_seen(text, text)", """
RETURNS void LANGUAGE sql {definer} AS $$
    INSERT INTO mt_nodes (node, last_seen, what) VALUES ($1, pg_catalog.now(), $2)
    ON CONFLICT (node) DO UPDATE SET last_seen = pg_catalog.now(), what = $2 $$"""),
    ("mt_note_miss(text, text, text, text)", """
RETURNS boolean LANGUAGE sql {definer} AS $$
    WITH noted AS (INSERT INTO mt_misses (job, session, slot, node) VALUES ($1, $2, $3, $4)
        ON CONFLICT DO NOTHING RETURNING 1)
    SELECT pg_catalog.count(*) > 0 FROM noted $$"""),
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
    ON CONFLICT (scope, name) DO UPDATE SET fields = excluded.fields, since = pg_catalog.now(),
        set_by = session_user $$"""),
    ("mt_unpause(text, text)", """
RETURNS integer LANGUAGE sql {definer} AS $$
    WITH gone AS (DELETE FROM mt_pauses WHERE scope = $1 AND name = $2 RETURNING 1)
    SELECT pg_catalog.count(*)::integer FROM gone $$"""),
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
    PERFORM pg_catalog.pg_notify('{channel}', 'halt ' || $1 || ' ' || $2);
    RETURN written;
END $$"""),
    ("mt_unhalt(text, text)", """
RETURNS integer LANGUAGE plpgsql {definer} AS $$
DECLARE gone integer;
BEGIN
    DELETE FROM mt_halts WHERE scope = $1 AND name = $2;
    GET DIAGNOSTICS gone = ROW_COUNT;
    PERFORM pg_catalog.pg_notify('{channel}', 'resume ' || $1 || ' ' || $2);
    RETURN gone;
END $$"""),
    ("mt_halt_list()", """
RETURNS TABLE (scope text, name text, fields text) LANGUAGE sql STABLE {definer} AS $$
    SELECT scope, name, fields FROM mt_halts ORDER BY since $$"""),
    ("mt_schema_version()", """
RETURNS integer LANGUAGE sql STABLE {definer} AS $$
    SELECT pg_catalog.max(version) FROM mt_schema $$"""),
)


def create_functions(schema: str) -> list[str]:
    """Every function, (re)created by each init after the migrations: the tables they read
    exist by then (a LANGUAGE sql body is checked against them when it is created)."""
    definer = _DEFINER.format(schema=quote_ident(schema))
    namespace = LOCK_NAMESPACE.replace("'", "''")
    return [f"CREATE OR REPLACE FUNCTION {signature} "
            + body.replace("{definer}", definer).replace("{namespace}", namespace)
            .replace("{channel}", HALT_CHANNEL)
            for signature, body in FUNCTIONS]
