"""A streaming standby of the cluster's PostgreSQL (issue 44, item 5), for the failover test and
the fault campaign's primary failovers (tests/e2e/controlfaults.py).

In the `pg` container: a second Debian cluster (`standby`, on a port of its own, listening where
the primary does: 127.0.0.1 and the host end of the veth, the same pg_hba.conf), copied from the
primary by pg_basebackup as a replication role that may log in from 127.0.0.1 only, streaming
from it; the primary's commits wait for it (synchronous_standby_names names it,
synchronous_commit = on, PostgreSQL's default). After a failover (`fail_over`: the primary down at
once, the standby promoted) `rebuild` makes the pair again the other way round: the old primary's
data replaced by a copy of the promoted server's, streaming from it, its synchronous standby.
Afterwards the cluster is as the other tests expect it: `main` the primary again (by a switchover
if a failover left the other one primary), the standby dropped, no synchronous standby, each
node's DSN naming `main` alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.fakes.pgserver import free_port

from .cluster import NODES, PASSWORD, Cluster

REPLICA_ROLE = "mt_replica"
PRIMARY = "main"  # the Debian cluster every other test uses
STANDBY = "standby"  # the standby's cluster name and its application_name on the primary


@dataclass
class StandbyPair:
    """The two servers of a campaign: which Debian cluster is the primary now, each one's port."""
    ports: dict[str, int]
    primary: str = PRIMARY
    streaming: bool = True  # False once making a standby again failed: no more failovers

    @property
    def standby(self) -> str:
        return STANDBY if self.primary == PRIMARY else PRIMARY


def _postgres(cluster: Cluster, *argv: str, check: bool = True):
    return cluster.pg.run(["runuser", "-u", "postgres", "--", *argv], check=check)


def _sql(cluster: Cluster, port: int, sql: str, check: bool = True) -> str:
    """One statement as postgres (ALTER SYSTEM may not share a transaction with another)."""
    return _postgres(cluster, "psql", "-p", str(port), "-d", "ledger", "-Atc", sql,
                     check=check).stdout.strip()


def unit(cluster: Cluster, name: str) -> str:
    return f"postgresql@{cluster.pg_version()}-{name}.service"


def both_hosts_dsn(cluster: Cluster, standby_port: int) -> None:
    """Each node's DSN names the primary and the standby, read-write sessions only."""
    for name in NODES:
        cluster.write_dsn(name, "127.0.0.1,127.0.0.1", f"{cluster.port},{standby_port}")


def stop_primary(cluster: Cluster, name: str = PRIMARY) -> None:
    """The primary goes down at once, as in a crash (no shutdown checkpoint)."""
    version = cluster.pg_version()
    _postgres(cluster, f"/usr/lib/postgresql/{version}/bin/pg_ctl", "-D",
              f"/var/lib/postgresql/{version}/{name}", "stop", "-m", "immediate")


def promote(cluster: Cluster, name: str = STANDBY) -> None:
    cluster.pg.run(["pg_ctlcluster", cluster.pg_version(), name, "promote"])


def _new_cluster(cluster: Cluster, version: str, name: str, port: int) -> None:
    """A Debian cluster `name` on `port`, reached as the primary is (its listen_addresses, the
    last line wins, and its pg_hba.conf); not started."""
    conf = f"/etc/postgresql/{version}"
    cluster.pg.run(["pg_createcluster", version, name, "-p", str(port), "--",
                    "--auth-host=scram-sha-256", "--auth-local=peer"])
    cluster.pg.run(f"cp {conf}/{PRIMARY}/pg_hba.conf {conf}/{name}/pg_hba.conf && "
                   f"grep '^listen_addresses' {conf}/{PRIMARY}/postgresql.conf "
                   f">> {conf}/{name}/postgresql.conf")


def _stream(cluster: Cluster, version: str, name: str, primary_port: int) -> None:
    """Cluster `name` (stopped, its data replaced by a copy of the server on primary_port)
    streaming from that server, then named its synchronous standby: its commits wait for it
    only once it streams."""
    data = f"/var/lib/postgresql/{version}/{name}"
    service = f"postgresql@{version}-{name}.service"
    cluster.pg.systemctl("stop", service, check=False)
    cluster.pg.run(["rm", "-rf", data])
    primary = (f"host=127.0.0.1 port={primary_port} user={REPLICA_ROLE} "
               f"password={PASSWORD} application_name={name}")
    _postgres(cluster, f"/usr/lib/postgresql/{version}/bin/pg_basebackup", "-D", data,
              "-R", "-X", "stream", "-d", primary, "-c", "fast")
    # -R wrote primary_conninfo; this line (the last one wins) names the standby for sure
    cluster.pg.run(f"echo \"primary_conninfo = '{primary}'\" >> {data}/postgresql.auto.conf")
    cluster.pg.systemctl("reset-failed", service, check=False)
    cluster.pg.systemctl("start", service)
    state = f"SELECT {{}} FROM pg_stat_replication WHERE application_name = '{name}'"
    cluster.pg.wait_for(lambda: _sql(cluster, primary_port, state.format("state"))
                        == "streaming", 60, f"{name} to stream", interval=0.5)
    _sql(cluster, primary_port, f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
    _sql(cluster, primary_port, "ALTER SYSTEM SET synchronous_commit = on")
    _sql(cluster, primary_port, "SELECT pg_reload_conf()")
    cluster.pg.wait_for(lambda: _sql(cluster, primary_port, state.format("sync_state"))
                        == "sync", 60, f"{name} to stream, synchronous", interval=0.5)


@contextmanager
def synchronous_standby(cluster: Cluster) -> Iterator[int]:
    """The standby streaming from the primary, every commit waiting for it; yields its port."""
    version, port = cluster.pg_version(), free_port()
    try:
        _sql(cluster, cluster.port, f"DROP ROLE IF EXISTS {REPLICA_ROLE}")
        _sql(cluster, cluster.port,
             f"CREATE ROLE {REPLICA_ROLE} REPLICATION LOGIN PASSWORD '{PASSWORD}'")
        hba = f"/etc/postgresql/{version}/{PRIMARY}/pg_hba.conf"
        cluster.pg.run(f"grep -q '{REPLICA_ROLE}' {hba} || echo 'host replication "
                       f"{REPLICA_ROLE} 127.0.0.1/32 scram-sha-256' >> {hba}")
        _sql(cluster, cluster.port, "SELECT pg_reload_conf()")
        _new_cluster(cluster, version, STANDBY, port)
        _stream(cluster, version, STANDBY, cluster.port)
        yield port
    finally:
        _restore(cluster, version)


@contextmanager
def standby_pair(cluster: Cluster) -> Iterator[StandbyPair]:
    """synchronous_standby's pair, for failovers one after the other: cluster.port names the
    primary of the moment (fail_over moves it); at the end `main` is the primary again."""
    version = cluster.pg_version()
    with synchronous_standby(cluster) as port:
        pair = StandbyPair({PRIMARY: cluster.port, STANDBY: port})
        try:
            yield pair
        finally:
            _switch_back(cluster, version, pair)


def fail_over(cluster: Cluster, pair: StandbyPair) -> float:
    """The primary down at once, the standby promoted: the primary now (cluster.port names it),
    alone until `rebuild`. Returns the seconds from the stop to the promotion's end."""
    old, new = pair.primary, pair.standby
    stop_primary(cluster, old)
    down = time.monotonic()
    promote(cluster, new)
    promoted = time.monotonic() - down
    pair.primary, cluster.port = new, pair.ports[new]
    # a copied postgresql.auto.conf must not make its commits wait for a standby not there
    _sql(cluster, cluster.port, "ALTER SYSTEM RESET synchronous_standby_names")
    _sql(cluster, cluster.port, "SELECT pg_reload_conf()")
    return promoted


def rebuild(cluster: Cluster, pair: StandbyPair) -> float:
    """The old primary made the new one's synchronous standby; returns the seconds it took."""
    start = time.monotonic()
    _stream(cluster, cluster.pg_version(), pair.standby, cluster.port)
    return time.monotonic() - start


def _switch_back(cluster: Cluster, version: str, pair: StandbyPair) -> None:
    """`main` the primary again: if it is the standby, a switchover (the primary stopped
    cleanly sends its standby every commit first, then `main` is promoted)."""
    if pair.primary != PRIMARY:
        cluster.pg.systemctl("stop", f"postgresql@{version}-{pair.primary}.service",
                             check=False)
        cluster.pg.run(["pg_ctlcluster", version, PRIMARY, "promote"], check=False)
        pair.primary = PRIMARY
    cluster.port = pair.ports[PRIMARY]


def _restore(cluster: Cluster, version: str) -> None:
    """The primary alone again, its commits waiting for no one; the standby dropped."""
    for name in NODES:
        cluster.write_dsn(name)
    main = f"postgresql@{version}-{PRIMARY}.service"
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
