"""The cluster claim's cost on the runner (host): `market-timers-run -- /bin/true` with the local
ledger vs the PostgreSQL ledger (a throwaway server on 127.0.0.1, password auth), with hyperfine;
and what importing psycopg would have cost instead of libpq through ctypes.

Each run of the PostgreSQL command claims a new (job, session): the ledger is truncated before
every run by hyperfine's --prepare, so every run takes the winning path (connect, peek, advisory
lock, insert), as a timer's start does.

Run alone: .venv/bin/python -m bench.cluster_claim   (root: the server runs as user postgres)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import PY, VENV_BIN, Check, Section, ensure_repo_on_path, table

NAME = "cluster_claim"
NEEDS_CONTAINER = False
RUNS = 40
GOAL_ADDED_MS = 25.0
PHASES = ["import ctypes", "load libpq (and the libraries it links)",
          "connect (TCP, a new backend, SCRAM-SHA-256)", "peek (holder)",
          "lock group (advisory lock and fence row)", "claim (insert)"]
# One fresh interpreter per sample, timing the claim's steps as the runner takes them (the
# ledger's own calls: their SQL is whatever this checkout's ledger sends).
PHASE_PROGRAM = """
import os, sys, time
t = [time.perf_counter()]
import ctypes
t.append(time.perf_counter())
from market_timers.ledger import Key, libpq
from market_timers.ledger import postgresql as pg
libpq._load()
t.append(time.perf_counter())
ledger = pg.PostgresLedger(sys.argv[1], "bench")
ledger.conn
t.append(time.perf_counter())
key = Key("bench-phases", "2026-01-05", os.urandom(6).hex())
ledger.holder(key)
t.append(time.perf_counter())
ledger.lock_group("bench-phases", key)
t.append(time.perf_counter())
ledger.claim(key, "timer", {"invocation": "phases"})
t.append(time.perf_counter())
print(" ".join(str((b - a) * 1000) for a, b in zip(t, t[1:])))
"""


def phases(dsn: str, samples: int = 15) -> list[float]:
    """Median ms of each of PHASES, over `samples` fresh interpreters."""
    runs = [[float(x) for x in subprocess.run([PY, "-c", PHASE_PROGRAM, dsn], check=True,
                                               capture_output=True, text=True).stdout.split()]
            for _ in range(samples)]
    return [sorted(r[i] for r in runs)[samples // 2] for i in range(len(PHASES))]


def run(_box=None) -> Section:
    ensure_repo_on_path()
    from tests.fakes.pgserver import PgServer, missing

    from bench.runner_overhead import runner_env

    s = Section(NAME, "Cluster claim on the runner (host, PostgreSQL on loopback)")
    reason = missing()
    if reason:
        s.checks.append(Check("cluster claim measured", None, reason))
        return s
    runner = str(VENV_BIN / "market-timers-run")
    server = PgServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="mt-bench-cluster-") as d:
            tmp = Path(d)
            dsn_file = tmp / "dsn"
            dsn_file.write_text(server.dsn + "\n")
            subprocess.run([PY, "-c", "import sys; from market_timers.ledger import postgresql "
                            "as pg; pg.init_schema(pg.connect(sys.argv[1]))", server.dsn],
                           check=True)
            local = runner_env(tmp)
            if os.environ.get("PYTHONPATH"):  # the checkout under test, not the venv's install
                local["PYTHONPATH"] = os.environ["PYTHONPATH"]
            cluster = dict(local, MARKET_LEDGER="postgresql", MARKET_NODE="bench",
                           MARKET_CLUSTER_DSN_FILE=str(dsn_file))
            truncate = (f"{PY} -c \"import sys; from market_timers.ledger import postgresql as "
                        f"pg; pg.connect(sys.argv[1]).execute('TRUNCATE mt_runs, mt_locks')\" "
                        f"'{server.dsn}'")
            wipe = f"rm -rf {tmp}/state"
            results = {}
            for label, env, prepare in (("local ledger", local, wipe),
                                        ("PostgreSQL ledger", cluster, truncate)):
                out = tmp / f"{label[0]}.json"
                subprocess.run(["hyperfine", "--shell=sh", "--warmup", "3", "--runs", str(RUNS),
                                "--prepare", prepare, "--export-json", str(out),
                                f"{runner} -- /bin/true"], env=env, check=True,
                               capture_output=True, text=True)
                results[label] = json.loads(out.read_text())["results"][0]
            steps = phases(server.dsn)
            imports = {}
            for mod in ("ctypes", "psycopg"):
                times = []
                for _ in range(15):
                    t0 = time.perf_counter()
                    ok = subprocess.run([PY, "-c", f"import {mod}"], capture_output=True)
                    times.append((time.perf_counter() - t0) * 1000)
                    if ok.returncode != 0:
                        times = []
                        break
                imports[mod] = sorted(times)[len(times) // 2] if times else None
    finally:
        server.destroy()
    rows = [[label, r["median"] * 1000, r["mean"] * 1000, r["stddev"] * 1000, r["min"] * 1000,
             max(r["times"]) * 1000] for label, r in results.items()]
    s.add(table(["runner -- /bin/true with", "median ms", "mean ms", "stddev ms", "min ms",
                 "max ms"], rows))
    added = (results["PostgreSQL ledger"]["median"] - results["local ledger"]["median"]) * 1000
    py = f"{PY} -c 'import X'"
    s.add(f"Added by the cluster claim (median difference): **{added:.1f} ms** (connect with "
          "scram-sha-256, peek, lock group, claim). Interpreter start plus an import, "
          f"median of 15 (`{py}`): ctypes {imports['ctypes']:.1f} ms; psycopg "
          + (f"{imports['psycopg']:.1f} ms" if imports["psycopg"] is not None
             else "not installed in this venv") + ".")
    s.add("Where it goes: the claim's steps timed inside a fresh interpreter (medians of 15; "
          "bench/cluster_claim.py:PHASE_PROGRAM):\n\n"
          + table(["step", "median ms"], [[p, ms] for p, ms in zip(PHASES, steps, strict=True)]))
    s.checks.append(Check(f"cluster claim adds ≤ {GOAL_ADDED_MS:.0f} ms to the runner (median)",
                          added <= GOAL_ADDED_MS, f"{added:.1f} ms"))
    s.headline.append(f"cluster claim on PostgreSQL (loopback) adds {added:.1f} ms to the "
                      "runner's start (median)")
    s.commands += [
        f"hyperfine --shell=sh --warmup 3 --runs {RUNS} --prepare 'rm -rf $TMP/state' "
        "'.venv/bin/market-timers-run -- /bin/true'",
        f"hyperfine --shell=sh --warmup 3 --runs {RUNS} --prepare '<TRUNCATE mt_runs, mt_locks>'"
        " '.venv/bin/market-timers-run -- /bin/true'   # MARKET_LEDGER=postgresql",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
