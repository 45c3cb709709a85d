"""Metrics at scale (host): one rewrite of the Prometheus textfile (metrics.update, what the
runner's record step and every dead-man pass do) against a run ledger of one and five years of a
5-minute periodic job (about 20,000 and 100,000 finished runs, each with its history line).

* incremental: the writer as it runs, reading only the key directories changed since the previous
  scan (metrics/scan.py); here one key changed (the run that just ended).
* full: the same writer with its scan note removed, so it reads every key directory, as every
  update did before the incremental scan (and as one does once a day).

In-process, the imports already done (a record step's own start is in runner_overhead): medians
of REPEATS updates each, taken in turns.

Run alone: .venv/bin/python -m bench.metrics_scale
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, table

NAME = "metrics_scale"
NEEDS_CONTAINER = False
PER_YEAR = 252 * 78  # sessions x 5-minute slots of an NYSE day
YEARS = (1, 5)
REPEATS = 7
GOAL_S = 0.5  # an incremental update with a year of runs
GOAL_RATIO = 0.2  # incremental / full read, both sizes

CONFIG = """unit_dir = "{base}/units"
state_dir = "{base}/state"
spool_dir = "{base}/spool"
runtime_dir = "{base}/run"
calendar = "XNYS"
[metrics]
textfile = "{base}/prom/market_timers.prom"
[[job]]
name = "poll"
every = "5min"
command = ["/usr/bin/true"]
"""


def build(base: Path, n: int):
    """A state directory with n finished runs of `poll`, counted in the history; all older than
    an hour, as a ledger is between two runs."""
    from market_timers import config, metrics
    from market_timers.ledger import Key
    from market_timers.ledger.local import LocalLedger

    (base / "prom").mkdir(parents=True)
    (base / "mt.toml").write_text(CONFIG.format(base=base))
    cfg = config.load(base / "mt.toml")
    cfg.state_dir.mkdir(parents=True)
    book = LocalLedger(str(cfg.state_dir))
    t0 = datetime(2020, 1, 2, 14, 30, tzinfo=UTC)

    def key(i: int) -> Key:
        t = t0 + timedelta(minutes=5 * i)
        return Key("poll", t.date().isoformat(), t.strftime("%H%M%S"))

    def run(i: int) -> None:
        t = t0 + timedelta(minutes=5 * i)
        inv = f"inv-{i}"
        book.claim(key(i), "timer", dict(
            scheduled_utc=t.strftime("%Y-%m-%dT%H:%M:%SZ"), started_utc=t.isoformat(),
            invocation=inv, late_sec=0.001, pid=1, host="h"))
        book.finish(key(i), inv, dict(result="success", exit_code="exited", exit_status="0",
                                      duration_sec=1.0, finished_utc=t.isoformat()))

    # One run made the ledger's way, copied to the others (a real claim fsyncs: too slow here).
    run(0)
    first = cfg.state_dir / "ledger" / "poll" / key(0).name
    texts = {p.name: p.read_text() for p in first.iterdir()}
    for i in range(1, n):
        d = cfg.state_dir / "ledger" / "poll" / key(i).name
        d.mkdir(exist_ok=True)
        for name, text in texts.items():
            (d / name).write_text(text.replace("inv-0", f"inv-{i}"))
    old = time.time_ns() - 3600 * 10**9
    for d in (cfg.state_dir / "ledger" / "poll").iterdir():
        os.utime(d, ns=(old, old))
    metrics.directory_exists = os.path.isdir  # the bench's own textfile directory
    metrics.update(cfg)  # the history catches up (once)
    return cfg, run


def measure(n: int) -> dict[str, float]:
    from market_timers import metrics
    from market_timers.metrics import scan

    base = Path(tempfile.mkdtemp(prefix="mt-metrics-", dir="/var/tmp"))
    try:
        cfg, one_more = build(base, n)
        note = cfg.state_dir / "metrics" / scan.NAME
        samples: dict[str, list[float]] = {"incremental": [], "full": []}
        i = n
        metrics.update(cfg)
        for _ in range(REPEATS):
            for how in ("incremental", "full"):
                one_more(i)  # the run that just ended
                i += 1
                if how == "full":
                    note.unlink()
                t = time.perf_counter()
                metrics.update(cfg)
                samples[how].append(time.perf_counter() - t)
        return {how: statistics.median(v) for how, v in samples.items()}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(_box=None) -> Section:
    s = Section(NAME, "8. Metrics at scale (host, in-process)")
    rows, results = [], {}
    for years in YEARS:
        n = years * PER_YEAR
        m = results[years] = measure(n)
        rows.append([f"{years} year(s): {n:,} runs", f"{m['incremental'] * 1000:.0f} ms",
                     f"{m['full'] * 1000:.0f} ms", f"{m['incremental'] / m['full']:.3f}"])
    s.add(table(["ledger (5-minute job)", "incremental update p50", "full read p50",
                 "ratio"], rows))
    s.add(f"Medians of {REPEATS} updates each, taken in turns; each after one more finished "
          "run. Before the incremental scan every update was a full read, and read the ledger "
          "twice (once more for the records of runs from before the ledger).")
    one, five = results[min(YEARS)], results[max(YEARS)]
    s.checks.append(Check(
        f"metrics update with a year of a 5-minute job ≤ {GOAL_S} s",
        one["incremental"] <= GOAL_S, f"{one['incremental']:.3f} s"))
    ratios = [m["incremental"] / m["full"] for m in results.values()]
    s.checks.append(Check(f"incremental / full read ≤ {GOAL_RATIO}", max(ratios) <= GOAL_RATIO,
                          " / ".join(f"{r:.3f}" for r in ratios)))
    s.add("What is left grows with the ledger too, slower: a stat of every key directory and "
          "one JSON line of the history per run ever counted, parsed at each update.")
    s.headline.append(
        f"metrics update, {max(YEARS)} years of a 5-minute job: {five['incremental']:.2f} s "
        f"(full read {five['full']:.2f} s)")
    s.commands.append(".venv/bin/python -m bench.metrics_scale")
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
