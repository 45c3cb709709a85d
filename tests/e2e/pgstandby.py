"""A streaming standby of the cluster's PostgreSQL (issue 44, item 5), for the failover test only.

In the `pg` container: a second Debian cluster (`standby`, on a port of its own of 127.0.0.1),
copied from the primary by pg_basebackup as a replication role that may log in from 127.0.0.1
only, streaming from it; the primary's commits wait for it (synchronous_standby_names names it,
synchronous_commit = on, PostgreSQL's default). Afterwards the cluster is as the other tests
expect it: the standby dropped, the primary (`main`) started with no synchronous standby, each
node's DSN naming it alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.fakes.pgserver import free_port

from .cluster import NODES, PASSWORD, Cluster

REPLICA_ROLE = "mt_replica"
STANDBY = "standby"  # the standby's cluster name and its application_name on the primary


def _postgres(cluster: Cluster, *argv: str, check: bool = True):
    return cluster.pg.run(["runuser", "-u", "postgres", "--", *argv], check=check)


def _sql(cluster: Cluster, port: int, sql: str, check: bool = True) -> str:
    """One statement as postgres (ALTER SYSTEM may not share a transaction with another)."""
    return _postgres(cluster, "psql", "-p", str(port), "-d", "ledger", "-Atc", sql,
                     check=check).stdout.strip()


def both_hosts_dsn(cluster: Cluster, standby_port: int) -> None:
    """Each node's DSN names the primary and the standby, read-write sessions only."""
    for name in NODES:
        cluster.write_dsn(name, "127.0.0.1,127.0.0.1", f"{cluster.port},{standby_port}")


def stop_primary(cluster: Cluster) -> None:
    """The primary goes down at once, as in a crash (no shutdown checkpoint)."""
    version = cluster.pg_version()
    _postgres(cluster, f"/usr/lib/postgresql/{version}/bin/pg_ctl", "-D",
              f"/var/lib/postgresql/{version}/main", "stop", "-m", "immediate")


def promote(cluster: Cluster) -> None:
    cluster.pg.run(["pg_ctlcluster", cluster.pg_version(), STANDBY, "promote"])


@contextmanager
def synchronous_standby(cluster: Cluster) -> Iterator[int]:
    """The standby streaming from the primary, every commit waiting for it; yields its port."""
    version, port = cluster.pg_version(), free_port()
    data = f"/var/lib/postgresql/{version}/{STANDBY}"
    try:
        _sql(cluster, cluster.port, f"DROP ROLE IF EXISTS {REPLICA_ROLE}")
        _sql(cluster, cluster.port,
             f"CREATE ROLE {REPLICA_ROLE} REPLICATION LOGIN PASSWORD '{PASSWORD}'")
        hba = f"/etc/postgresql/{version}/main/pg_hba.conf"
        cluster.pg.run(f"grep -q '{REPLICA_ROLE}' {hba} || echo 'host replication "
                       f"{REPLICA_ROLE} 127.0.0.1/32 scram-sha-256' >> {hba}")
        _sql(cluster, cluster.port, "SELECT pg_reload_conf()")
        cluster.pg.run(["pg_createcluster", version, STANDBY, "-p", str(port), "--",
                        "--auth-host=scram-sha-256", "--auth-local=peer"])
        cluster.pg.run(["rm", "-rf", data])
        primary = (f"host=127.0.0.1 port={cluster.port} user={REPLICA_ROLE} "
                   f"password={PASSWORD} application_name={STANDBY}")
        _postgres(cluster, f"/usr/lib/postgresql/{version}/bin/pg_basebackup", "-D", data,
                  "-R", "-X", "stream", "-d", primary, "-c", "fast")
        # -R wrote primary_conninfo; this line (the last one wins) names the standby for sure
        cluster.pg.run(f"echo \"primary_conninfo = '{primary}'\" >> {data}/postgresql.auto.conf")
        cluster.pg.systemctl("start", f"postgresql@{version}-{STANDBY}.service")
        _sql(cluster, cluster.port, f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'")
        _sql(cluster, cluster.port, "ALTER SYSTEM SET synchronous_commit = on")
        _sql(cluster, cluster.port, "SELECT pg_reload_conf()")
        state = "SELECT sync_state FROM pg_stat_replication WHERE application_name = " \
                f"'{STANDBY}'"
        cluster.pg.wait_for(lambda: _sql(cluster, cluster.port, state) == "sync", 60,
                            "the standby to stream, synchronous", interval=0.5)
        yield port
    finally:
        _restore(cluster, version)


def _restore(cluster: Cluster, version: str) -> None:
    """The primary alone again, its commits waiting for no one; the standby dropped."""
    for name in NODES:
        cluster.write_dsn(name)
    main = f"postgresql@{version}-main.service"
    cluster.pg.systemctl("reset-failed", main, check=False)
    cluster.pg.systemctl("start", main, check=False)
    try:
        cluster.pg.wait_for(lambda: _sql(cluster, cluster.port, "SELECT 1", check=False) == "1",
                            60, "the primary to accept connections again", interval=0.5)
    except TimeoutError:
        pass  # the reset below is tried anyway; the next test's heal() starts it again
    # ALTER SYSTEM and a reload commit nothing: they do not wait for the missing standby
    for sql in ("ALTER SYSTEM RESET synchronous_standby_names",
                "ALTER SYSTEM RESET synchronous_commit", "SELECT pg_reload_conf()"):
        _sql(cluster, cluster.port, sql, check=False)
    cluster.pg.run(["pg_dropcluster", "--stop", version, STANDBY], check=False)
