"""Two nodes and a PostgreSQL run ledger, on real systemd (issue 10, section 2).

Three booted containers share the host's network namespace: `pg` runs Debian's postgresql on its
own port of 127.0.0.1; `ny4-a` (the preferred node, standby_delay 0) and `ny4-b` (a standby,
standby_delay 2s) have the .deb installed, the same jobs and timers, and the DSN credential.
Every job appends "<node> <job> <start> <end> <fence>" to a log in its node; the assertions read
both nodes' logs (from their root directories on the host) for what ran where and when.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.fakes.pgserver import free_port

from .conftest import install_package, require_e2e
from .container import Container, fresh_container
from .scenario import CREDSTORE, Job, Scenario, instant_in
from .test_watch import start_deadman

pytestmark = pytest.mark.e2e

NODES = ("ny4-a", "ny4-b")
DELAY = {"ny4-a": 0, "ny4-b": 2}
NODE_ROLE = {"ny4-a": "mt_ny4_a", "ny4-b": "mt_ny4_b"}  # one PostgreSQL role per node
PASSWORD = "e2e-ledger-pw"
LOG_DIR = "/var/lib/e2e-cluster"
CLUSTER_JOB_PATH = "/usr/local/lib/e2e-jobs/cluster-job"
CLUSTER_JOB = f"""#!/bin/sh
# e2e cluster job: append "<node> <job> <start> <end> <fence> <fence check>" to the shared log.
start=$(date +%s.%N)
sleep "${{1:-0}}"
end=$(date +%s.%N)
check=$(market-timers fence check >/dev/null 2>&1 && echo holds || echo lost)
echo "$MARKET_NODE $MARKET_JOB $start $end $MARKET_FENCE $check" >> {LOG_DIR}/runs.log
"""


class Cluster:
    def __init__(self, pg: Container, nodes: dict[str, Container], port: int, api):
        self.pg, self.nodes, self.port, self.api = pg, nodes, port, api
        self.scenes = {name: Scenario(box, api) for name, box in nodes.items()}

    def dsn(self, role: str) -> str:
        """The DSN of `role`: the owner's (mt, for `cluster init`) or a node's own role."""
        return (f"host=127.0.0.1 port={self.port} dbname=ledger user={role} password={PASSWORD} "
                "target_session_attrs=read-write")

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

    def schedule(self, jobs: list[Job], top: str = "") -> None:
        for name, scene in self.scenes.items():
            if not scene.box.running:
                continue
            extra = (f'\n[cluster]\nnode = "{name}"\nstandby_delay = "{DELAY[name]}s"\n')
            scene.schedule(jobs, extra=extra, top=top)

    def wait_runs(self, count: int, timeout: float) -> list:
        box = next(iter(self.nodes.values()))
        return box.wait_for(lambda: len(self.runs()) >= count and self.runs(), timeout,
                            f"{count} runs in the shared log", interval=0.3)

    def psql(self, sql: str) -> str:
        return self.pg.run(["runuser", "-u", "postgres", "--", "psql", "-p", str(self.port),
                            "-d", "ledger", "-Atc", sql]).stdout.strip()

    def reset(self) -> None:
        # Units first, then the ledger: a node the previous test powered off and booted again
        # may still start a Persistent= catch-up of its elapsed timer. Stopped and deleted
        # before the ledger is emptied, it cannot claim that session in the emptied ledger (it
        # would run, and count as a run of this test).
        running = [scene for scene in self.scenes.values() if scene.box.running]
        for scene in running:
            scene.teardown()
        self.psql("TRUNCATE mt_runs, mt_refusals, mt_locks, mt_misses, mt_tickets, mt_pauses, "
                  "mt_halts")
        for box in self.nodes.values():
            (box.root / LOG_DIR.lstrip("/") / "runs.log").unlink(missing_ok=True)
        for scene in running:
            scene.install()


def _start_postgresql(box: Container, port: int) -> None:
    """Debian's postgresql in the `pg` container, on 127.0.0.1:port only, password auth."""
    box.write_file("/etc/postgresql-common/createcluster.conf", "create_main_cluster = false\n")
    box.run(["apt-get", "update", "-q"], timeout=300)
    box.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
            timeout=600)
    version = box.run("ls /usr/lib/postgresql | sort -n | tail -1").stdout.strip()
    box.run(["pg_createcluster", version, "main", "-p", str(port), "--",
             "--auth-host=scram-sha-256", "--auth-local=peer"])
    box.run(["sed", "-i", "s/^#\\?listen_addresses.*/listen_addresses = '127.0.0.1'/",
             f"/etc/postgresql/{version}/main/postgresql.conf"])
    box.systemctl("start", f"postgresql@{version}-main.service")
    # the owner role (runs `cluster init`, owns the tables) and one role per node (README)
    sql = " ".join(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}';"
                   for role in ("mt", *NODE_ROLE.values()))
    box.run(["runuser", "-u", "postgres", "--", "psql", "-p", str(port), "-c", sql])
    box.run(["runuser", "-u", "postgres", "--", "createdb", "-p", str(port), "-O", "mt",
             "ledger"])


@pytest.fixture(scope="module")
def cluster(release, deb_path: Path, fake_api) -> Iterator[Cluster]:
    """The three containers of the release under test (the .deb is that release's build)."""
    require_e2e()
    port = free_port()
    with ExitStack() as stack:
        pg = stack.enter_context(fresh_container("mt-pg", suite=release.suite))
        _start_postgresql(pg, port)
        nodes = {}
        for name in NODES:
            box = stack.enter_context(fresh_container(f"mt-{name}", suite=release.suite))
            install_package(box, box.copy_in(deb_path))
            nodes[name] = box
        c = Cluster(pg, nodes, port, fake_api)
        for name, box in nodes.items():
            box.write_file(f"{CREDSTORE}/market-timers.cluster-dsn",
                           c.dsn(NODE_ROLE[name]) + "\n", 0o600)
            box.write_file(CLUSTER_JOB_PATH, CLUSTER_JOB, 0o755)
            box.run(["install", "-d", "-m", "0777", LOG_DIR])
        nodes["ny4-a"].write_file("/root/ledger-owner-dsn", c.dsn("mt") + "\n", 0o600)
        out = nodes["ny4-a"].run(["market-timers", "cluster", "init", "--dsn-file",
                                  "/root/ledger-owner-dsn",
                                  *(f"--node-role={r}" for r in NODE_ROLE.values())]).stdout
        assert "created" in out or "up to date" in out
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


def test_both_nodes_up_each_fire_runs_exactly_once_on_the_preferred_node(cluster: Cluster):
    cluster.reset()
    first = ClusterJob("fire0", instant_in(20))
    jobs = [first] + [ClusterJob(f"fire{i}", later(first, i)) for i in range(1, 10)]
    cluster.schedule(jobs)
    runs = cluster.wait_runs(10, timeout=60)
    time.sleep(4)  # the standby's starts (2 s later) must all have been refused by now
    runs = cluster.runs()
    assert sorted(r[1] for r in runs) == sorted(j.name for j in jobs), runs
    assert {r[0] for r in runs} == {"ny4-a"}, "standby_delay 0 on ny4-a: it claims every fire"
    refused = cluster.psql("SELECT count(*) FROM mt_refusals WHERE node = 'ny4-b' AND "
                           "fields LIKE '%refused=already-ran%'")
    assert refused == "10"
    for j in jobs:
        lateness = [r[2] - j.instant.timestamp() for r in runs if r[1] == j.name][0]
        assert 0 <= lateness < 2, f"{j.name} ran {lateness:.2f}s after its instant"
    # each job, as its own user with no DSN, asked its supervisor whether its fence holds
    assert cluster.fence_checks() == {j.name: "holds" for j in jobs}


def test_preferred_node_powered_off_the_standby_runs_on_time_plus_delay(cluster: Cluster):
    cluster.reset()
    j = ClusterJob("closing-orders", instant_in(25))
    cluster.schedule([j])
    cluster.nodes["ny4-a"].poweroff()
    try:
        (run,) = cluster.wait_runs(1, timeout=60)
        assert run[0] == "ny4-b"
        late = run[2] - j.instant.timestamp()
        assert DELAY["ny4-b"] <= late < DELAY["ny4-b"] + 3, f"standby ran {late:.2f}s late"
        holder = cluster.psql("SELECT node FROM mt_runs WHERE job = 'closing-orders'")
        assert holder == "ny4-b"
        b = cluster.scenes["ny4-b"]
        # The real unit (user market-timers, the DSN from the credential drop-in sync wrote): a
        # pass that could not read the ledger would exit 1 and fail this start.
        start_deadman(b.box)
        b.flush_outbox()
        assert not b.messages("telegram", "did not run"), "the standby's deadman saw a miss"
        assert not b.messages("telegram", "cannot be reached"), "the deadman had no ledger"
    finally:
        box = cluster.nodes["ny4-a"]
        box.boot()


def test_a_lock_group_shared_across_nodes_never_runs_concurrently(cluster: Cluster):
    cluster.reset()
    # reconcile runs on ny4-b from T+2 (its standby_delay) to T+10. opening-orders is due at T+6;
    # its timers pre-fire 2 s early (lead), so ny4-a tries the group at T+4 (not at T+2, where it
    # would race ny4-b's claim) and ny4-b at T+8 (instant + standby_delay): both inside.
    first = ClusterJob("reconcile", instant_in(25), sleep=8, lock="orders")
    second = ClusterJob("opening-orders", later(first, 6), lock="orders")
    cluster.schedule([first, second])
    # The preferred node does not run `reconcile` (its timer was stopped): the standby does, and
    # holds the group when ny4-a's `opening-orders` starts: only the cluster lock can stop it.
    cluster.nodes["ny4-a"].systemctl("stop", first.timer)
    cluster.wait_runs(1, timeout=60)
    time.sleep(max(0.0, first.instant.timestamp() + 12 - time.time()))
    runs = cluster.runs()
    assert [(r[0], r[1]) for r in runs] == [("ny4-b", "reconcile")], runs
    skipped = cluster.psql("SELECT string_agg(node, ',' ORDER BY node) FROM mt_refusals WHERE "
                           "job = 'opening-orders' AND fields LIKE '%overlap-skipped%'")
    assert skipped == "ny4-a,ny4-b"
    journal = cluster.scenes["ny4-a"].journal_of(second)
    assert "busy on node ny4-b" in journal


def test_a_node_killed_mid_run_releases_its_lock_group_within_the_bound(cluster: Cluster):
    cluster.reset()
    long = ClusterJob("statement", instant_in(20), sleep=300, lock="books", timeout="10min")
    cluster.schedule([long])
    box_a = cluster.nodes["ny4-a"]
    box_a.wait_for(lambda: cluster.psql("SELECT node FROM mt_locks WHERE grp = 'books'"), 60,
                   "ny4-a to hold lock group books")
    # The job's main process (the runner exec'd it) dies by SIGKILL; --kill-who=main because
    # systemd 252 in the container fails the cgroup-wide kill with EIO ("auxiliary processes").
    # systemd then stops the rest of the unit, and the host goes down.
    box_a.run(["systemctl", "kill", "--kill-who=main", "--signal=SIGKILL", long.service])
    box_a.poweroff()
    killed = time.monotonic()
    try:
        nxt = ClusterJob("report", instant_in(6), lock="books")
        cluster.schedule([nxt])  # only ny4-b is up
        cluster.wait_runs(1, timeout=60)
        (run,) = [r for r in cluster.runs() if r[1] == "report"]
        assert run[0] == "ny4-b"
        assert time.monotonic() - killed < 30
    finally:
        box_a.boot()


def test_postgresql_stopped_both_nodes_skip_and_alert_then_recover(cluster: Cluster):
    cluster.reset()
    version = cluster.pg.run("ls /usr/lib/postgresql | sort -n | tail -1").stdout.strip()
    unit = f"postgresql@{version}-main.service"
    j = ClusterJob("signal", instant_in(20))
    cluster.schedule([j])
    cluster.pg.systemctl("stop", unit)
    needle = "cannot be reached (on_db_unreachable = skip)"
    try:
        def both_alerted():
            for scene in cluster.scenes.values():
                scene.flush_outbox()
            return len(cluster.scenes["ny4-a"].messages("telegram", needle)) >= 2

        cluster.nodes["ny4-a"].wait_for(both_alerted, 90, "a ledger alert from each node",
                                        interval=1)
        time.sleep(3)
        assert cluster.runs() == []
        assert len(cluster.scenes["ny4-a"].messages("telegram", needle)) == 2
    finally:
        cluster.pg.systemctl("start", unit)
    after = ClusterJob("signal2", instant_in(20))
    cluster.schedule([after])
    (run,) = cluster.wait_runs(1, timeout=60)
    assert run[:2] == ("ny4-a", "signal2")


def test_a_pause_made_on_one_node_holds_the_job_on_both_until_resumed_on_the_other(
        cluster: Cluster):
    cluster.reset()
    j = ClusterJob("closing-orders", instant_in(20))
    cluster.schedule([j])
    out = cluster.nodes["ny4-a"].run(["market-timers", "pause", "closing-orders", "--note",
                                      "broker maintenance"]).stdout
    assert "on every node" in out
    count = "SELECT count(*) FROM mt_refusals WHERE job = 'closing-orders' AND fields LIKE " \
            "'%refused=paused%'"
    cluster.pg.wait_for(lambda: cluster.psql(count) == "2", 60,
                        "both nodes' starts refused as paused", interval=0.5)
    time.sleep(1)
    assert cluster.runs() == [], "a paused job ran"
    assert "broker maintenance" in cluster.scenes["ny4-b"].journal_of(j)
    out = cluster.nodes["ny4-b"].run(["market-timers", "resume", "closing-orders"]).stdout
    assert "ended its pause" in out
    again = ClusterJob("closing-orders", instant_in(15))  # the same session: it never ran
    cluster.schedule([again])
    (run,) = cluster.wait_runs(1, timeout=60)
    assert run[:2] == ("ny4-a", "closing-orders")


ON_HALT_PATH = "/usr/local/lib/e2e-jobs/on-halt"
ON_HALT = f"""#!/bin/sh
# e2e on_halt: the firm's cancel-all, one line per run in this node's log
echo "$(hostname) $MARKET_HALT_SCOPE $MARKET_HALT_REASON" >> {LOG_DIR}/on_halt.log
"""


def test_a_halt_on_one_node_stops_the_other_nodes_order_job_and_holds_everywhere(
        cluster: Cluster):
    cluster.reset()
    for box in cluster.nodes.values():
        box.write_file(ON_HALT_PATH, ON_HALT, 0o755)
        (box.root / LOG_DIR.lstrip("/") / "on_halt.log").unlink(missing_ok=True)
    top = f'on_halt = ["{ON_HALT_PATH}"]\n'
    orders = ClusterJob("closing-orders", instant_in(20), sleep=120, orders=True,
                        timeout="5min")
    cluster.schedule([orders], top=top)
    for box in cluster.nodes.values():  # sync with [cluster] started each node's listener
        assert box.show("market-halt-watch.service", "ActiveState") == "active"
    # ny4-b runs the order job (ny4-a's timer is stopped): only ny4-b's listener can stop it
    cluster.nodes["ny4-a"].systemctl("stop", orders.timer)
    b = cluster.nodes["ny4-b"]
    b.wait_for(lambda: b.show(orders.service, "ActiveState") == "active", 60,
               "ny4-b to run the order job")
    b.wait_for(lambda: cluster.psql("SELECT node FROM mt_runs WHERE job = 'closing-orders'"),
               30, "its claim")
    halted = time.monotonic()
    out = cluster.nodes["ny4-a"].run(["market-timers", "halt", "--reason", "runaway algo"]).stdout
    print(f"[e2e] market-timers halt on ny4-a took {time.monotonic() - halted:.2f}s")
    assert "every node" in out
    try:
        b.wait_for(lambda: b.show(orders.service, "ActiveState") != "active", 30,
                   "ny4-b's listener to stop the order job")
    except TimeoutError:
        raise AssertionError(b.journal("-u", "market-halt-watch.service", "-o", "cat")) from None
    print(f"[e2e] ny4-b's order job stopped within {time.monotonic() - halted:.2f}s of the "
          "halt command's start on ny4-a")
    assert "halted" in b.journal("-u", "market-halt-watch.service", "-o", "cat")
    # the non-order job still runs; the order job's next start is refused on both nodes
    again = ClusterJob("opening-orders", instant_in(12), orders=True)
    signal = ClusterJob("signal", later(again, 3), lock="signal")
    cluster.schedule([again, signal], top=top)
    count = "SELECT count(*) FROM mt_refusals WHERE job = 'opening-orders' AND fields LIKE " \
            "'%refused=halted%'"
    cluster.pg.wait_for(lambda: cluster.psql(count) == "2", 60,
                        "both nodes' starts refused as halted", interval=0.5)
    runs = cluster.wait_runs(1, timeout=60)
    assert [r[1] for r in runs] == ["signal"], runs
    # on_halt ran once in the cluster, on the node that made the halt
    logs = {name: (box.root / LOG_DIR.lstrip("/") / "on_halt.log") for name, box in
            cluster.nodes.items()}
    cluster.pg.wait_for(lambda: logs["ny4-a"].exists(), 30, "on_halt on ny4-a")
    assert len(logs["ny4-a"].read_text().splitlines()) == 1 and not logs["ny4-b"].exists()
    assert "runaway algo" in logs["ny4-a"].read_text()
    # a resume on the other node lets the next session's start run
    out = b.run(["market-timers", "resume"]).stdout
    assert "ended the halt" in out
    last = ClusterJob("opening-orders", instant_in(12), orders=True)  # the same session
    cluster.schedule([last], top=top)
    runs = cluster.wait_runs(2, timeout=60)
    assert [r[1] for r in runs] == ["signal", "opening-orders"], runs
