"""Metrics at scale (host): one rewrite of the Prometheus textfile (metrics.update, what the
runner's record step and every dead-man pass do) with one and five years of runs behind it: eight
daily jobs (their ledger keys are never pruned: 2,016 a year) and an every-minute periodic job
(98,280 runs a year, each a line of the metrics' history; its ledger keys go after
retention_days, so a week of them, 2,730, is in the ledger).

* incremental: the writer as it runs, reading only the key directories changed since the previous
  scan (metrics/scan.py) and only the history's new lines (metrics/history.py); here one run
  ended since the previous update.
* full: the same writer with its notes (scan.json, counts.json) removed, so it reads every key
  directory and parses every line of the history, as every update did before (and as one does
  once a day).

In-process, the imports already done (a record step's own start is in runner_overhead): medians
of REPEATS updates each, taken in turns.

Run alone: .venv/bin/python -m bench.metrics_scale
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, defer_removal, table

NAME = "metrics_scale"
NEEDS_CONTAINER = False
SESSIONS = 252  # a year of NYSE sessions
DAILY_JOBS = 8
PER_SESSION = 390  # the every-minute job's slots, 09:30-16:00 New York
KEPT_DAYS = 7  # retention_days: the periodic job's ledger keys kept
YEARS = (1, 5)
REPEATS = 7
# Regression guards, set after the first measurement (0.16 s, ×0.065, with a `make test` beside
# it): an incremental update, five years; incremental / full read, five years.
GOAL_S = 0.25
GOAL_RATIO = 0.1

CONFIG = """unit_dir = "{base}/units"
state_dir = "{base}/state"
spool_dir = "{base}/spool"
runtime_dir = "{base}/run"
calendar = "XNYS"
[metrics]
textfile = "{base}/prom/market_timers.prom"
[[job]]
name = "cycle"
every = "1min"
command = ["/usr/bin/true"]
"""
DAILY = """[[job]]
name = "daily-{i}"
event = "close"
offset = "-{i}min"
command = ["/usr/bin/true"]
"""


def build(base: Path, years: int):
    """A state directory with `years` of finished runs, counted in the history; every key
    directory older than an hour, as a ledger is between two runs. Returns (config, history
    lines, a function that records one more finished run of daily-0)."""
    from market_timers import metrics
    from market_timers.config import loader as config
    from market_timers.ledger import Key
    from market_timers.ledger.local import LocalLedger

    (base / "prom").mkdir(parents=True)
    (base / "mt.toml").write_text(CONFIG.format(base=base) + "".join(
        DAILY.format(i=i) for i in range(DAILY_JOBS)))
    cfg = config.load(base / "mt.toml")
    (cfg.state_dir / "metrics").mkdir(parents=True)
    book = LocalLedger(str(cfg.state_dir))
    day0 = datetime(2020, 1, 2, 20, 0, tzinfo=UTC)

    def finished(key: Key, t: datetime, inv: str) -> None:
        book.claim(key, "timer", dict(
            scheduled_utc=t.strftime("%Y-%m-%dT%H:%M:%SZ"), started_utc=t.isoformat(),
            invocation=inv, late_sec=0.001, pid=1, host="h"))
        book.finish(key, inv, dict(result="success", exit_code="exited", exit_status="0",
                                   duration_sec=1.0, finished_utc=t.isoformat()))

    # One run made the ledger's way, copied to the others (a real claim fsyncs: too slow here).
    finished(Key("daily-0", "2020-01-02"), day0, "inv-0")
    first = cfg.state_dir / "ledger" / "daily-0" / "2020-01-02"
    texts = {p.name: p.read_text() for p in first.iterdir()}
    lines, n = [], 0
    days = SESSIONS * years
    for d in range(days):
        session = (day0 + timedelta(days=d)).date().isoformat()
        keys = [Key(f"daily-{i}", session) for i in range(DAILY_JOBS)]
        kept = d >= days - KEPT_DAYS  # the periodic job's keys of the last week are still here
        if kept:
            keys += [Key("cycle", session, f"{13 + (30 + m) // 60:02d}{(30 + m) % 60:02d}00")
                     for m in range(PER_SESSION)]
        for key in keys:
            n += 1
            directory = cfg.state_dir / "ledger" / key.job / key.name
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in texts.items():
                (directory / name).write_text(text.replace("inv-0", f"inv-{n}"))
            lines.append({"key": f"inv-{n}", "job": key.job, "session": session, "kind": "ok"})
        if not kept:
            lines += [{"key": f"cycle-{session}-{m}", "job": "cycle", "session": session,
                       "kind": "ok"} for m in range(PER_SESSION)]
    (cfg.state_dir / "metrics" / "history.jsonl").write_text(
        "".join(json.dumps(e, sort_keys=True) + "\n" for e in lines))
    old = time.time_ns() - 3600 * 10**9
    for job_dir in (cfg.state_dir / "ledger").iterdir():
        for directory in job_dir.iterdir():
            os.utime(directory, ns=(old, old))
    metrics.directory_exists = os.path.isdir  # the bench's own textfile directory
    metrics.update(cfg)  # the notes are made (once)
    later = [day0 + timedelta(days=days + i) for i in range(2 * REPEATS + 1)]

    def one_more(i: int) -> None:
        finished(Key("daily-0", later[i].date().isoformat()), later[i], f"new-{i}")

    return cfg, len(lines), one_more


def measure(years: int) -> dict[str, float]:
    from market_timers import metrics
    from market_timers.metrics import history, scan

    base = Path(tempfile.mkdtemp(prefix="mt-metrics-", dir="/var/tmp"))
    try:
        cfg, lines, one_more = build(base, years)
        notes = [cfg.state_dir / "metrics" / name for name in (scan.NAME, history.NOTE)]
        samples: dict[str, list[float]] = {"incremental": [], "full": []}
        i = 0
        for _ in range(REPEATS):
            for how in ("incremental", "full"):
                one_more(i)  # the run that just ended
                i += 1
                if how == "full":
                    for note in notes:
                        note.unlink()
                t = time.perf_counter()
                metrics.update(cfg)
                samples[how].append(time.perf_counter() - t)
        keys = sum(1 for _ in (cfg.state_dir / "ledger").glob("*/*"))
        return {"keys": keys, "lines": lines,
                **{how: statistics.median(v) for how, v in samples.items()}}
    finally:
        defer_removal(base)  # at the end of the run: bench.common.defer_removal


def run(_box=None) -> Section:
    s = Section(NAME, "8. Metrics at scale (host, in-process)")
    rows, results = [], {}
    for years in YEARS:
        m = results[years] = measure(years)
        rows.append([f"{years} year(s)", f"{m['keys']:,}", f"{m['lines']:,}",
                     f"{m['incremental'] * 1000:.0f} ms", f"{m['full'] * 1000:.0f} ms",
                     f"{m['incremental'] / m['full']:.3f}"])
    s.add(table(["runs behind", "ledger keys", "history lines", "incremental update p50",
                 "full read p50", "ratio"], rows))
    s.add(f"Medians of {REPEATS} updates each, taken in turns; each after one more finished "
          "run. Before the incremental reads every update was a full read, and read the ledger "
          "twice (once more for the records of runs from before the ledger) and the history "
          "twice. What an incremental update still does in proportion to the runs behind it: a "
          "stat of every ledger key directory, and a search of the history's bytes (mmap) for "
          "each run it read again.")
    five = results[max(YEARS)]
    s.checks.append(Check(
        f"metrics update with {max(YEARS)} years of runs ≤ {GOAL_S} s",
        five["incremental"] <= GOAL_S, f"{five['incremental']:.3f} s"))
    s.checks.append(Check(
        f"incremental / full read, {max(YEARS)} years, ≤ {GOAL_RATIO}",
        five["incremental"] / five["full"] <= GOAL_RATIO,
        f"{five['incremental'] / five['full']:.3f}"))
    s.headline.append(
        f"metrics update after {max(YEARS)} years of runs ({five['lines']:,} in the history, "
        f"{five['keys']:,} ledger keys): {five['incremental'] * 1000:.0f} ms (full read "
        f"{five['full']:.2f} s)")
    s.commands.append(".venv/bin/python -m bench.metrics_scale")
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
