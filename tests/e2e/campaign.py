"""The fault campaign of issue 23 on the cluster of tests/e2e/cluster.py: fires of several jobs
(single jobs, order jobs sharing lock groups, a periodic job in a lock group of its own) while
faults are injected at random times from a seeded RNG; then, for every fire, what a user would
ask: did it run twice, did it run later than its grace, did it neither run nor was anyone told?

Node ny4-a runs in the namespace of the cluster's veth for the whole campaign (its link to the
database can stall; alerts reach the fake API through a relay on its loopback). A fire's runs are
the lines its job wrote to starts.log as it started (on either node: a run killed mid-way still
counts); a fire is alerted when a message at the fake Telegram or Slack API (criticals go to
Telegram, warnings to Slack) names its job (but for one that says the job's unit "failed with
exit status 0": that run happened; for the periodic job: names it and, when the fake API stamps
arrivals, arrived between its slot and `settle` seconds after its deadline).

The faults: kill -9 of a running job's main process (the runner or its supervisor), a node
powered off and booted again, PostgreSQL stopped and started, a stall between ny4-a and the
database (the veth down, then up: nothing reaches the other side), a stall of ny4-b's
connections (ny4-b reaches the database through a proxy on 127.0.0.1 that holds every byte, a
new connection's too, while the TCP connections stay up: "hold"), an admin session holding
ACCESS EXCLUSIVE on the ledger's tables, and a clock step on one node: for its duration, that
node's job units (the runner, the job, the record step) see their clock stepped by 10 to 60 s
either way. The containers share the host's CLOCK_REALTIME (Linux time namespaces cover
CLOCK_MONOTONIC and CLOCK_BOOTTIME only), so the step is made by the LD_PRELOAD shim
tests/fakes/clockshift.c in every job unit's drop-in, reading its offset from a file of the node
that the fault writes and empties: systemd's own timers on that node (PID 1) still fire by the
host's clock, so the campaign tests the runner's defence (the ledger refuses a skewed node's
claim), not timers firing at the wrong time. And issue 44's (tests/e2e/controlfaults.py): a halt
while the ledger is unreachable, a halt while ny4-b's halt-watch connection is held, a node whose
DSN lost its password, a primary failover of PostgreSQL (a synchronous streaming standby made
before the first fire, promoted right after a fire's claim committed, the old primary made its
standby again); a halt's window counts the fires it held and any start inside it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from .campaigncounts import Fault, Fire, Outcome, alert_messages, alerted_fires
from .cluster import (
    CLOCKSHIFT_FILE,
    CLUSTER_JOB_PATH,
    LOG_DIR,
    NODES,
    Cluster,
    ClusterJob,
    clock_dropin,
    install_clockshift,
    shift_clock,
)
from .controlfaults import KINDS as CONTROL_FAULTS
from .controlfaults import failover_pair, inject_control_fault
from .jobtrail import job_trail

FAULTS = ("kill9", "poweroff", "pg-stop", "stall", "hold", "admin-lock", "clock-step",
          *CONTROL_FAULTS)
LEFT_OUT = {"a clock step of PID 1": "the containers share the host's CLOCK_REALTIME (not "
                                     "namespaced): the clock-step fault steps the clock of the "
                                     "node's job units (runner, job, record step) with an "
                                     "LD_PRELOAD shim, but systemd's own timers on that node "
                                     "still fire by the host's clock"}
GROUP_OF = {"single": None, "orders": "orders", "books": "books"}
PERIODIC = "tick"


def plan_fires(n: int, first: float, spacing: int, every: int, grace: int,
               rng: random.Random) -> tuple[list[ClusterJob], str, list[Fire]]:
    """n fires: single-fire jobs every `spacing` s (kinds in turn: single, orders, books) and a
    periodic job every `every` s over the same window. Returns the jobs, the periodic job's TOML
    and the fires."""
    window = spacing * n / (1 + spacing / every)
    ticks = max(1, int(window // every))
    singles = n - ticks
    jobs, fires = [], []
    kinds = list(GROUP_OF)
    for i in range(singles):
        kind = kinds[i % len(kinds)]
        instant = datetime.fromtimestamp(first + i * spacing, UTC)
        keys = {"grace": f"{grace}s"}
        if GROUP_OF[kind]:
            keys["lock"] = GROUP_OF[kind]
        sleep = 1 if GROUP_OF[kind] else rng.choice([0, 0.5, 1, 2])
        job = ClusterJob(f"{kind}{i:03d}", instant, sleep=sleep, **keys)
        jobs.append(job)
        fires.append(Fire(job.name, instant.timestamp(), grace))
    tick0 = datetime.fromtimestamp(first + 1, UTC)
    midnight = datetime.combine(tick0.date(), datetime.min.time(), tzinfo=UTC)
    off = int((tick0 - midnight).total_seconds())
    periodic = f'''
[[job]]
name = "{PERIODIC}"
every = "{every}s"
from = "open+{off}s"
until = "open+{off + every * (ticks - 1)}s"
command = ["{CLUSTER_JOB_PATH}", "1"]
lock = "ticks"
grace = "{grace}s"
read_write_paths = ["{LOG_DIR}"]
'''
    fires += [Fire(PERIODIC, tick0.timestamp() + k * every, grace) for k in range(ticks)]
    return jobs, periodic, sorted(fires, key=lambda f: f.scheduled)


def plan_faults(rng: random.Random, start: float, end: float, kinds: tuple[str, ...],
                longest: float, most: int | None, gap: float) -> list[Fault]:
    """Faults one after the other from `start` until `end` (or `most` of them), each kind in
    turn in a shuffled order, 3 s to `gap` s apart; stalls, power-offs and PostgreSQL stops last
    10 s to `longest` s."""
    order = list(kinds)
    rng.shuffle(order)
    faults: list[Fault] = []
    t = start + rng.uniform(2, 6)
    while t < end and (most is None or len(faults) < most):
        kind = order[len(faults) % len(order)]
        # a failover lasts as long as it takes (a promotion, a standby made again): its
        # measured seconds replace this guess
        seconds = {"kill9": 0.0, "admin-lock": rng.uniform(4, 8), "primary-failover": 15.0}.get(
            kind, rng.uniform(10, longest))
        node = {"stall": "ny4-a", "hold": "ny4-b", "pg-stop": "pg", "admin-lock": "pg",
                "halt-unreachable": "pg", "hold-watch": "ny4-b",
                "primary-failover": "pg"}.get(kind) or rng.choice(NODES)
        fault = Fault(t, kind, node, round(seconds, 1))
        if kind == "clock-step":
            fault.step = round(rng.choice((-1, 1)) * rng.uniform(10, 60), 1)
        faults.append(fault)
        t += seconds + (12 if kind == "poweroff" else 0) + rng.uniform(3, gap)
    return faults


def _running_job_unit(box) -> str | None:
    out = box.run(["systemctl", "list-units", "--state=active", "--plain", "--no-legend",
                   "market-*@*.service"], check=False).stdout
    for line in out.splitlines():
        unit = line.split()[0] if line.split() else ""
        if unit.startswith(tuple(f"market-{k}" for k in (*GROUP_OF, PERIODIC))):
            return unit
    return None


def inject(cluster: Cluster, fault: Fault, log: Callable[[str], None]) -> None:
    """Do the fault (blocking for its duration) and note what was done."""
    primary = cluster.pair.primary if cluster.pair else "main"  # a failover moves it
    pg_unit = f"postgresql@{cluster.pg_version()}-{primary}.service"
    if fault.kind == "kill9":
        # a node with a job running now (within 6 s), the chosen node first
        nodes = [fault.node] + [n for n in NODES if n != fault.node]
        deadline = time.time() + 6
        while time.time() < deadline:
            for name in nodes:
                box = cluster.nodes[name]
                unit = _running_job_unit(box) if box.running else None
                if unit:
                    box.run(["systemctl", "kill", "--kill-who=main", "--signal=SIGKILL", unit],
                            check=False)
                    fault.node, fault.note = name, f"killed {unit.split('@')[0]}"
                    log(f"fault kill9: {name} {unit}")
                    return
            time.sleep(0.2)
        fault.note = "no job running on either node: nothing killed"
    elif fault.kind == "poweroff":
        box = cluster.nodes[fault.node]
        box.poweroff(timeout=120)  # a loaded machine: the defaults are for a quiet one
        log(f"fault poweroff: {fault.node} off for {fault.seconds:.0f}s")
        time.sleep(fault.seconds)
        box.boot(timeout=240)
        fault.note = "powered off, booted again"
    elif fault.kind == "admin-lock":
        log(f"fault admin-lock: {fault.seconds:.0f}s")
        cluster.psql("BEGIN; LOCK TABLE mt_runs, mt_locks IN ACCESS EXCLUSIVE MODE; "
                     f"SELECT pg_sleep({fault.seconds}); COMMIT")
        fault.note = "LOCK TABLE mt_runs, mt_locks IN ACCESS EXCLUSIVE MODE"
    elif fault.kind in CONTROL_FAULTS:
        inject_control_fault(cluster, fault, pg_unit, log)
    elif fault.kind in ("pg-stop", "stall", "hold", "clock-step"):
        shift = cluster.nodes[fault.node].root / CLOCKSHIFT_FILE.lstrip("/") \
            if fault.kind == "clock-step" else None
        begin, end, what, fault.note = {
            "pg-stop": (lambda: cluster.pg.systemctl("stop", pg_unit),
                        lambda: cluster.pg.systemctl("start", pg_unit),
                        "PostgreSQL stopped", "stopped, started"),
            "stall": (cluster.link.down, cluster.link.up, "ny4-a's link down",
                      "veth down, then up"),
            "hold": (lambda: cluster.proxy.hold(), lambda: cluster.proxy.release(),
                     "ny4-b's connections held", "every byte held by the proxy, then released"),
            "clock-step": (lambda: shift.write_text(f"{int(fault.step * 1000)}\n"),
                           lambda: shift.write_text(""),
                           f"{fault.node}'s job units {fault.step:+.1f}s",
                           f"job units' clock {fault.step:+.1f} s (LD_PRELOAD shim; PID 1's "
                           "timers on the host's clock)"),
        }[fault.kind]
        begin()
        log(f"fault {fault.kind}: {what} for {fault.seconds:.0f}s")
        try:
            time.sleep(fault.seconds)
        finally:
            end()
    else:
        raise ValueError(f"unknown fault {fault.kind!r}")


def _clock_shim(cluster: Cluster, names: list[str], remove: bool = False) -> None:
    """The clock shim in every unit of the campaign's jobs on both nodes, its offset file empty
    (no step until a clock-step fault writes it); or, `remove`, taken out again."""
    for box in cluster.nodes.values():
        shift = box.root / CLOCKSHIFT_FILE.lstrip("/")
        shift.write_text("")
        shift.chmod(0o644)
        if remove:
            box.run(["rm", "-f", *map(clock_dropin, names)], check=False)
        else:
            install_clockshift(box)
            for name in names:
                shift_clock(box, name, f"MT_CLOCK_SHIFT_FILE={CLOCKSHIFT_FILE}")
        box.run(["systemctl", "daemon-reload"], check=False)


def _starts(cluster: Cluster) -> list[tuple[str, str, float, float]]:
    """(node, job, scheduled, start) of every run that started, on either node."""
    rows = []
    for box in cluster.nodes.values():
        path = box.root / LOG_DIR.lstrip("/") / "starts.log"
        for line in (path.read_text() if path.exists() else "").splitlines():
            node, job, scheduled, start = line.split()
            when = datetime.fromisoformat(scheduled.replace("Z", "+00:00")).timestamp()
            rows.append((node, job, when, float(start)))
    return rows


def _trails(cluster: Cluster, fires: list[Fire], starts, messages) -> dict[str, str]:
    """job_trail of each single-fire job that ran twice or neither ran nor was named by a
    message (read now, before the nodes are booted again)."""
    runs = [job for _, job, _, _ in starts]
    return {f.job: job_trail(cluster, f.job) for f in fires if f.job != PERIODIC and (
        runs.count(f.job) > 1 or (f.job not in runs and not any(
            f.job in m["text"] for m in messages)))}


def run_campaign(cluster: Cluster, n: int, seed: int, spacing: int = 2, every: int = 10,
                 grace: int = 10, kinds: tuple[str, ...] = FAULTS, most: int | None = None,
                 longest: float = 30, gap: float = 15, settle: float = 65,
                 log: Callable[[str], None] = print) -> Outcome:
    rng = random.Random(seed)
    cluster.reset()
    with cluster.behind_link("ny4-a"), cluster.through_proxy("ny4-b") as cluster.proxy, \
            failover_pair(cluster, kinds) as cluster.pair:
        first = math.ceil(time.time() + 15 + 0.1 * n)
        jobs, periodic, fires = plan_fires(n, first, spacing, every, grace, rng)
        cluster.schedule(jobs, extra=periodic, horizon=1)
        if "hold-watch" in kinds:  # its halt-watch connects through the proxy, to be held
            cluster.nodes["ny4-b"].systemctl("restart", "market-halt-watch.service")
        if "clock-step" in kinds:  # every job unit on both nodes reads the (empty) offset file
            _clock_shim(cluster, [j.name for j in jobs] + [PERIODIC])
        end = fires[-1].scheduled
        faults = plan_faults(rng, first, end - 5, kinds, longest, most, gap)
        log(f"campaign: {len(fires)} fires from {datetime.fromtimestamp(first, UTC):%H:%M:%S} "
            f"to {datetime.fromtimestamp(end, UTC):%H:%M:%S}; faults: "
            + ", ".join(f"{f.kind}@+{f.at - first:.0f}s" for f in faults))
        for fault in faults:
            time.sleep(max(0.0, fault.at - time.time()))
            fault.at = time.time()
            inject(cluster, fault, log)
        # the last runs end, the dead-man passes (every minute) judge what was missed
        time.sleep(max(0.0, end + grace + settle - time.time()))
        for scene in cluster.scenes.values():
            if not scene.box.running:
                scene.box.boot()
            scene.flush_outbox()
        messages = alert_messages(cluster.api)
        starts = _starts(cluster)
        trails = _trails(cluster, fires, starts, messages)
        if "clock-step" in kinds:
            _clock_shim(cluster, [j.name for j in jobs] + [PERIODIC], remove=True)
            skewed = cluster.psql("SELECT count(*) FROM mt_refusals WHERE "
                                  "fields LIKE '%refused=clock-skew%'")
            for fault in faults:
                if fault.kind == "clock-step":
                    fault.note += f"; {skewed} starts in the campaign refused it (exit 179)"
    if {"hold-watch", "primary-failover"} & set(kinds):  # its DSN names the database again,
        # not the closed proxy (ny4-a's halt-watch started again as behind_link booted it)
        cluster.nodes["ny4-b"].systemctl("restart", "market-halt-watch.service", check=False)
    out = Outcome(seed, fires, faults, messages=[m["text"] for m in messages])
    out.alerted = alerted_fires(fires, messages, PERIODIC, settle)
    for i, fire in enumerate(fires):
        out.runs[i] = [(node, start) for node, job, when, start in starts
                       if job == fire.job and (job != PERIODIC or abs(when - fire.scheduled) < 1)]
    log(out.summary())
    for label, bad in (("twice", out.twice()), ("late", out.late()),
                       ("neither run nor alerted", out.neither()),
                       ("run inside a halt", out.halted_runs())):
        for f in bad:
            log(f"  {label}: {f.job} {f.slot} runs {out.runs[fires.index(f)]}")
            if f.job in trails:
                log(trails[f.job])
    return out
