"""Two nodes and a PostgreSQL run ledger on real systemd, for the cluster e2e tests and the fault
campaign (bench/fault_campaign.py).

Three booted containers: `pg` runs Debian's postgresql on its own port of 127.0.0.1 (in the host's
network) and on the host end of a veth of the caller's own (tests/e2e/netlink.py); `ny4-a` (the
preferred node, standby_delay 0) and `ny4-b` (a standby, standby_delay 2s) have the .deb
installed, the same jobs and timers, and the DSN credential. They share the host's network, but
ny4-a can be booted again in the link's namespace (`behind_link`), where its traffic to the
database can be dropped (the link down: no clean close).
Every job appends "<node> <job> <start> <end> <fence> <fence check>" to runs.log in its node and,
as it starts, "<node> <job> <scheduled or slot> <start>" to starts.log; callers read both nodes'
logs (from their root directories on the host) for what ran where and when.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from tests.fakes.clockshift import build as build_clockshift
from tests.fakes.pgserver import free_port
from tests.fakes.stallproxy import HoldingProxy

from .conftest import install_package
from .container import Container, boot_refresh_over, fresh_container
from .netlink import LoopbackRelay, VethLink
from .rootfs import ensure_pg_rootfs
from .scenario import CREDSTORE, Job, Scenario

NODES = ("ny4-a", "ny4-b")
DELAY = {"ny4-a": 0, "ny4-b": 2}
NODE_ROLE = {"ny4-a": "mt_ny4_a", "ny4-b": "mt_ny4_b"}  # one PostgreSQL role per node
OPERATOR_ROLE = "mt_operator"  # lifts a halt or a pause (issue 44): root's credential on a node
OPERATOR_CREDENTIAL = "/etc/credstore/market-timers.cluster-operator-dsn"
PASSWORD = "e2e-ledger-pw"
LOG_DIR = "/var/lib/e2e-cluster"
CLUSTER_JOB_PATH = "/usr/local/lib/e2e-jobs/cluster-job"
CLUSTER_JOB = f"""#!/bin/sh
# e2e cluster job: "<node> <job> <scheduled or slot> <start>" to starts.log as it starts, then
# "<node> <job> <start> <end> <fence> <fence check>" to runs.log when it is done.
start=$(date +%s.%N)
echo "$MARKET_NODE $MARKET_JOB ${{MARKET_SLOT_UTC:-$MARKET_SCHEDULED_UTC}} $start" \\
    >> {LOG_DIR}/starts.log
sleep "${{1:-0}}"
end=$(date +%s.%N)
check=$(market-timers fence check >/dev/null 2>&1 && echo holds || echo lost)
echo "$MARKET_NODE $MARKET_JOB $start $end $MARKET_FENCE $check" >> {LOG_DIR}/runs.log
"""


# A clock step of one node's job units (the containers share the host's CLOCK_REALTIME): the
# LD_PRELOAD shim tests/fakes/clockshift.c, built on the host (Debian 12's glibc, the oldest of
# the releases under test; it needs nothing newer), shifts the runner's, the job's and the record
# step's clock by MT_CLOCK_SHIFT_MS, or by the milliseconds in the file MT_CLOCK_SHIFT_FILE, read
# at every call (a step at run time). systemd's own timers on the node still fire by the host's
# clock: the step reaches the runner and the job, not PID 1.
CLOCKSHIFT_SO = "/usr/local/lib/e2e-jobs/clockshift.so"
CLOCKSHIFT_FILE = f"{LOG_DIR}/clockshift"  # empty: no shift


def install_clockshift(box: Container) -> None:
    """The shim in the node's root directory (built on the host)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = build_clockshift(Path(tmp) / "clockshift.so")
        target = box.root / CLOCKSHIFT_SO.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(out.read_bytes())
        target.chmod(0o755)


def clock_dropin(job: str) -> str:
    """The drop-in of every unit of `job` (its template's .d directory)."""
    return f"/etc/systemd/system/market-{job}@.service.d/e2e-clockshift.conf"


def shift_clock(box: Container, job: str, shift: str) -> None:
    """Every service unit of `job` on the node runs with the shim: `shift` is its environment,
    MT_CLOCK_SHIFT_MS=-30000 or MT_CLOCK_SHIFT_FILE=PATH. Takes effect at the next sync or
    daemon-reload."""
    box.write_file(clock_dropin(job), f"[Service]\nEnvironment=LD_PRELOAD={CLOCKSHIFT_SO} "
                                      f"{shift}\n")


class Cluster:
    def __init__(self, pg: Container, nodes: dict[str, Container], port: int, api,
                 link: VethLink, node_roles: bool = True):
        self.pg, self.nodes, self.port, self.api, self.link = pg, nodes, port, api, link
        self.scenes = {name: Scenario(box, api) for name, box in nodes.items()}
        # False for a package older than `cluster init --node-role` (before issue 23's item 3):
        # its nodes connect as the owner role, as its README said
        self.node_roles = node_roles
        # None: the config leaves [cluster] on_db_unreachable at its default (skip); "run" or
        # "skip" writes it (bench/fault_campaign.py --on-db-unreachable)
        self.on_db_unreachable: str | None = None
        # the proxy ny4-b reaches the database through, inside through_proxy() (the campaign)
        self.proxy: HoldingProxy | None = None
        # a campaign's primary and standby (pgstandby.StandbyPair) when it fails the primary
        # over; self.port names the primary of the moment
        self.pair = None

    def dsn(self, role: str, host: str = "127.0.0.1", port: int | str | None = None) -> str:
        """The DSN of `role`: the owner's (mt, for `cluster init`) or a node's own role."""
        return (f"host={host} port={port or self.port} dbname=ledger user={role} "
                f"password={PASSWORD} target_session_attrs=read-write")

    def write_dsn(self, name: str, host: str = "127.0.0.1",
                  port: int | str | None = None) -> None:
        """The node's DSN credential, written in its root directory (running or not)."""
        path = self.nodes[name].root / CREDSTORE.lstrip("/") / "market-timers.cluster-dsn"
        path.parent.mkdir(mode=0o700, exist_ok=True)
        role = NODE_ROLE[name] if self.node_roles else "mt"
        path.write_text(self.dsn(role, host, port) + "\n")
        path.chmod(0o600)

    @contextmanager
    def through_proxy(self, name: str) -> Iterator[HoldingProxy]:
        """Node `name` (on the host's network) reaches PostgreSQL through a proxy on 127.0.0.1
        that can hold its connections (tests/fakes/stallproxy.py): its DSN names the proxy
        until the end of the block (each job start reads it)."""
        proxy = HoldingProxy(self.port)
        try:
            self.write_dsn(name, port=proxy.port)
            yield proxy
        finally:
            proxy.release()
            self.write_dsn(name)
            proxy.close()

    @contextmanager
    def behind_link(self, name: str) -> Iterator[Container]:
        """Node `name` booted again in the link's namespace, reaching PostgreSQL over the veth
        (and the fake alert API through a relay on the namespace's loopback); booted again on
        the host's network afterwards, the link up."""
        box = self.nodes[name]
        relay = LoopbackRelay(self.link, self.api.port).start()
        box.poweroff()
        try:
            box.network_namespace = self.link.path
            self.write_dsn(name, self.link.host_addr)
            box.boot()
            yield box
        finally:
            self.link.up()
            box.poweroff()
            relay.stop()
            box.network_namespace = None
            self.write_dsn(name)
            box.boot()

    def heal(self) -> list[str]:
        """Boot again what an earlier test left off or broken (a node that did not come back
        from a power-off, one left in the link's namespace): each node on the host's network
        with its DSN, PostgreSQL's server started. Returns what was booted again."""
        healed = []
        self.link.up()
        if self.pg.ensure_healthy():
            healed.append("pg")
        self.pg.systemctl("start", f"postgresql@{self.pg_version()}-main.service")
        for name, box in self.nodes.items():
            if box.network_namespace is not None:  # behind_link() did not finish its way out
                box.poweroff()
                box.network_namespace = None
                self.write_dsn(name)
            if box.ensure_healthy():
                healed.append(name)
            boot_refresh_over(box)
        return healed

    def fence_checks(self) -> dict[str, str]:
        """Each run's `market-timers fence check`, from inside the job: job -> holds | lost."""
        out = {}
        for box in self.nodes.values():
            log = box.root / LOG_DIR.lstrip("/") / "runs.log"
            for line in (log.read_text() if log.exists() else "").splitlines():
                fields = line.split()
                out[fields[1]] = fields[5] if len(fields) > 5 else "?"
        return out

    def runs(self) -> list[tuple[str, str, float, float]]:
        """Every run on either node, by start time: (node, job, start, end)."""
        rows = []
        for box in self.nodes.values():
            log = box.root / LOG_DIR.lstrip("/") / "runs.log"
            text = log.read_text() if log.exists() else ""
            for line in text.splitlines():
                node, job, start, end, *_ = line.split()
                rows.append((node, job, float(start), float(end)))
        return sorted(rows, key=lambda r: r[2])

    def schedule(self, jobs: list[Job], extra: str = "", horizon: int = 2,
                 top: str = "") -> None:
        """The jobs (and `extra` TOML, e.g. a periodic job; `top`, top-level keys) on every
        running node, synced: the nodes at once (on a loaded host one sync takes 7-15 s, and
        one after the other they passed the tests' lead)."""
        def one(name: str, scene: Scenario) -> None:
            cluster = f'\n[cluster]\nnode = "{name}"\nstandby_delay = "{DELAY[name]}s"\n'
            if self.on_db_unreachable:
                cluster += f'on_db_unreachable = "{self.on_db_unreachable}"\n'
            scene.schedule(jobs, horizon=horizon, extra=cluster + extra, top=top, move_out=False)

        running = [(n, s) for n, s in self.scenes.items() if s.box.running]
        with ThreadPoolExecutor(max_workers=len(running) or 1) as pool:
            for done in [pool.submit(one, n, s) for n, s in running]:
                done.result()  # a node's failure fails the test

    def pg_version(self) -> str:
        return self.pg.run("ls /usr/lib/postgresql | sort -n | tail -1").stdout.strip()

    def wait_runs(self, count: int, timeout: float) -> list:
        box = next(iter(self.nodes.values()))
        return box.wait_for(lambda: len(self.runs()) >= count and self.runs(), timeout,
                            f"{count} runs in the shared log", interval=0.3)

    def psql(self, sql: str, port: int | None = None) -> str:
        """`sql` on the primary (or the server on `port`: a promoted standby)."""
        return self.pg.run(["runuser", "-u", "postgres", "--", "psql", "-p", str(port or self.port),
                            "-d", "ledger", "-Atc", sql]).stdout.strip()

    def reset(self) -> None:
        # Units first, then the ledger: a node the previous test powered off and booted again
        # may still start a Persistent= catch-up of its elapsed timer. Stopped and deleted
        # before the ledger is emptied, it cannot claim that session in the emptied ledger (it
        # would run, and count as a run of this test).
        running = [scene for scene in self.scenes.values() if scene.box.running]
        for scene in running:
            scene.teardown()
        tables = ("mt_runs", "mt_refusals", "mt_locks", "mt_misses", "mt_tickets", "mt_pauses",
                  "mt_halts")
        have = set(self.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                   .split())  # an older package's schema lacks the later tables
        self.psql("TRUNCATE " + ", ".join(t for t in tables if t in have))
        for box in self.nodes.values():
            for log in ("runs.log", "starts.log"):
                (box.root / LOG_DIR.lstrip("/") / log).unlink(missing_ok=True)
        for scene in running:
            scene.install()


# The cluster tests sync each node themselves and never wait for the refresh, so the nodes'
# market-refresh.timer loses its boot-time trigger (an empty OnBootSec= clears the monotonic
# ones): a test after a power-off waited a minute for it (the one-host tests keep it).
NO_BOOT_REFRESH = "/etc/systemd/system/market-refresh.timer.d/e2e-no-boot-refresh.conf"


def start_postgresql(box: Container, port: int, link: VethLink) -> None:
    """Debian's postgresql in the `pg` container, on 127.0.0.1:port and the host end of the
    test's own veth only, password auth."""
    if not box.exists("/usr/lib/postgresql"):  # the cached rootfs has it (ensure_pg_rootfs)
        box.write_file("/etc/postgresql-common/createcluster.conf",
                       "create_main_cluster = false\n")
        box.run(["apt-get", "update", "-q"], timeout=300)
        box.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
                timeout=600)
    version = box.run("ls /usr/lib/postgresql | sort -n | tail -1").stdout.strip()
    box.run(["pg_createcluster", version, "main", "-p", str(port), "--",
             "--auth-host=scram-sha-256", "--auth-local=peer"])
    box.run(["sed", "-i",
             f"s/^#\\?listen_addresses.*/listen_addresses = '127.0.0.1,{link.host_addr}'/",
             f"/etc/postgresql/{version}/main/postgresql.conf"])
    box.run(f"echo 'host all all {link.node_addr}/32 scram-sha-256' "
            f">> /etc/postgresql/{version}/main/pg_hba.conf")
    box.systemctl("start", f"postgresql@{version}-main.service")
    # the owner role (runs `cluster init`, owns the tables) and one role per node (README)
    sql = " ".join(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}';"
                   for role in ("mt", *NODE_ROLE.values(), OPERATOR_ROLE))
    box.run(["runuser", "-u", "postgres", "--", "psql", "-p", str(port), "-c", sql])
    box.run(["runuser", "-u", "postgres", "--", "createdb", "-p", str(port), "-O", "mt",
             "ledger"])


def side_by_side(stack: ExitStack, contexts: list) -> list:
    """Enter each context manager in a thread of its own (the three boots at once); every one
    that entered is exited by `stack`, and the first failure is raised once all are done."""
    with ThreadPoolExecutor(len(contexts)) as pool:
        futures = [pool.submit(cm.__enter__) for cm in contexts]
    entered, failure = [], None
    for cm, future in zip(contexts, futures, strict=True):
        try:
            entered.append(future.result())
            stack.push(cm)
        except BaseException as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return entered


def each_at_once(*calls) -> None:
    """Run the calls in threads; raise the first failure once all are done."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    for future in futures:
        future.result()


@contextmanager
def booted_cluster(suite: str, deb_path: Path, api) -> Iterator[Cluster]:
    """The three containers of a Debian release, the .deb (that release's build) installed on
    both nodes, the ledger's schema created; powered off and the link deleted afterwards. The
    three boot at once, and PostgreSQL's install runs beside the nodes' (most of it is waiting)."""
    port = free_port()
    with ExitStack() as stack:
        link = stack.enter_context(VethLink("cluster"))  # deleted last, whatever happens
        pg, *boxes = side_by_side(stack, [
            fresh_container("mt-pg", suite=suite, source=ensure_pg_rootfs)] + [
            fresh_container(f"mt-{name}", suite=suite) for name in NODES])
        nodes = dict(zip(NODES, boxes, strict=True))
        for box in boxes:  # before the package: its timer never has a boot-time trigger
            box.write_file(NO_BOOT_REFRESH, "[Timer]\nOnBootSec=\n")
        each_at_once(lambda: start_postgresql(pg, port, link),
                     *(lambda box=box: install_package(box, box.copy_in(deb_path))
                       for box in boxes))
        usage = nodes["ny4-a"].run(["market-timers", "cluster", "init", "--help"],
                                   check=False)
        c = Cluster(pg, nodes, port, api, link,
                    node_roles="--node-role" in usage.stdout + usage.stderr)
        for name, box in nodes.items():
            c.write_dsn(name)
            box.write_file(CLUSTER_JOB_PATH, CLUSTER_JOB, 0o755)
            box.run(["install", "-d", "-m", "0777", LOG_DIR])
        nodes["ny4-a"].write_file("/root/ledger-owner-dsn", c.dsn("mt") + "\n", 0o600)
        roles = [f"--node-role={r}" for r in NODE_ROLE.values()] if c.node_roles else []
        if "--operator-role" in usage.stdout + usage.stderr:  # issue 44: resume is its only
            roles.append(f"--operator-role={OPERATOR_ROLE}")
            for box in nodes.values():
                box.write_file(OPERATOR_CREDENTIAL, c.dsn(OPERATOR_ROLE) + "\n", 0o600)
        out = nodes["ny4-a"].run(["market-timers", "cluster", "init", "--dsn-file",
                                  "/root/ledger-owner-dsn", *roles]).stdout
        assert "created" in out or "up to date" in out, out
        for scene in c.scenes.values():
            scene.install()
        yield c
        for scene in c.scenes.values():
            if scene.box.running:
                scene.teardown()


class ClusterJob(Job):
    """A session job whose command is the cluster job (sleeps, then logs node and job)."""

    def __init__(self, name: str, instant: datetime, sleep: float = 0, **keys):
        keys = {"grace": "30s", "read_write_paths": [LOG_DIR], **keys}
        super().__init__(name, instant, [str(sleep)], keys)

    def toml(self) -> str:
        return Job.toml(self).replace(
            f'command = ["/usr/local/lib/e2e-jobs/job", "{self.args[0]}"]',
            f'command = ["{CLUSTER_JOB_PATH}", "{self.args[0]}"]')


def later(job: Job, seconds: float) -> datetime:
    return datetime.fromtimestamp(job.instant.timestamp() + seconds, UTC)
