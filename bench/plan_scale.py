"""Plans at scale (host): every calendar exchange_calendars ships over 10 years in one
`plan --json`, against the cost of just building those calendars; and `render` of ~50,000 units
against `plan --json` of the same fires.

* baseline: a fresh Python process that imports exchange_calendars and builds every calendar for
  the planner's window (whole years FROM..TO, inside the calendar's data), keeping them all, as
  the planner's cache does. Same process design as the command: a fresh interpreter, imports
  included.
* `market-timers plan --from FROM --to TO --json` for a config with an `open` and a `close` job
  on every calendar, its output written to a file (streamed).
* `market-timers render --out DIR` of plan_render's 10 calendars x 10 jobs x 250 sessions (an
  empty DIR: every unit written), and `plan --json` of the same config and instant.

Wall time, CPU time (user + sys) and peak RSS from `/usr/bin/time -v`, medians of REPEATS runs
taken in turns (so that the machine's load hits each alike). The goals are judged on CPU time
and peak RSS (the wall-clock ratios are shown too). Then one cProfile of the plan: the
top functions by own time.

Run alone: .venv/bin/python -m bench.plan_scale
"""

from __future__ import annotations

import pstats
import re
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import PY, VENV_BIN, Check, Section, scratch_dir, table
from bench.plan_render import NOW, write_config

NAME = "plan_scale"
NEEDS_CONTAINER = False
FROM, TO = "2017-01-01", "2026-12-31"
REPEATS = 3
PLAN_GOAL = 1.5  # x the baseline, time and memory
RENDER_GOAL = 5.0  # x plan --json of the same fires
RENDER_POINT = (10, 10, 250)

# The baseline: exchange_calendars alone. A calendar whose data starts or ends inside the window
# is built inside its bounds (as the planner does); one that cannot be built is counted.
BASELINE = """
import sys, warnings
warnings.simplefilter("ignore")
import pandas as pd
import exchange_calendars as xc
start, end = pd.Timestamp(sys.argv[1]), pd.Timestamp(sys.argv[2])
built, failed = [], []
for name in sorted(xc.get_calendar_names(include_aliases=False)):
    try:
        try:
            built.append(xc.get_calendar(name, start=start, end=end))
        except ValueError:
            cls = type(xc.get_calendar(name))
            lo = max(start, cls.bound_min() or start)
            hi = min(end, cls.bound_max() or end)
            built.append(xc.get_calendar(name, start=lo, end=hi))
    except Exception:
        failed.append(name)
print(len(built), len(failed), sum(len(c.sessions) for c in built))
"""


def calendar_config(path: Path) -> int:
    """An open and a close job on every calendar; the number of calendars."""
    names = subprocess.run(
        [PY, "-W", "ignore", "-c", "import exchange_calendars as xc; "
         "print(*sorted(xc.get_calendar_names(include_aliases=False)))"],
        capture_output=True, text=True, check=True).stdout.split()
    jobs = []
    for cal in names:
        slug = re.sub(r"[^a-z0-9]+", "-", cal.lower()).strip("-")
        for event in ("open", "close"):
            jobs.append(f'[[job]]\nname = "c-{slug}-{event}"\ncalendar = "{cal}"\n'
                        f'event = "{event}"\ncommand = ["/bin/true"]\n')
    path.write_text("\n".join(jobs))
    return len(names)


def timed(argv: list[str], stdout=None) -> dict:
    """One fresh process under /usr/bin/time -v: wall s, cpu s, peak RSS MiB, its stdout."""
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], stdout=stdout or subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    err = proc.stderr

    def field(label: str) -> str:
        return re.search(rf"{re.escape(label)}: (\S+)", err).group(1)

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {"wall": wall, "cpu": float(field("User time (seconds)"))
            + float(field("System time (seconds)")),
            "rss": int(field("Maximum resident set size (kbytes)")) / 1024,
            "out": proc.stdout if stdout is None else ""}


def median(samples: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def count_fires(path: Path) -> int:
    with path.open() as f:
        return sum(1 for line in f if line.startswith('    "job": '))


def top_functions(prof: Path, n: int = 8) -> list[list[object]]:
    stats = pstats.Stats(str(prof)).stats
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in stats.values())
    rows = sorted(((tt, ct, nc, f"{Path(file).name}:{line} {func}")
                   for (file, line, func), (_cc, nc, tt, ct, _c) in stats.items()), reverse=True)
    return [[where, calls, own, cum, f"{own / total:.0%}"]
            for own, cum, calls, where in rows[:n]]


def run(_box=None) -> Section:
    s = Section(NAME, "7. Plans at scale (host, fresh processes, imports included)")
    mt = str(VENV_BIN / "market-timers")
    tmp = scratch_dir("mt-bench-scale-")
    cfg = tmp / "every-calendar.toml"
    n_cals = calendar_config(cfg)
    small = tmp / "render.toml"
    write_config(small, *RENDER_POINT)
    plan_argv = [mt, "--config", str(cfg), "plan", "--from", FROM, "--to", TO, "--json"]
    ahead_argv = [mt, "--config", str(small), "--now", NOW, "plan", "--json"]
    base, plans, renders, aheads = [], [], [], []
    for i in range(REPEATS):
        base.append(timed([PY, "-c", BASELINE, FROM, TO]))
        with (tmp / "plan.json").open("w") as out:
            plans.append(timed(plan_argv, stdout=out))
        with (tmp / "ahead.json").open("w") as out:
            aheads.append(timed(ahead_argv, stdout=out))
        # a new directory each time: deleting 50,000 units right before a render would time
        # the file system's reuse of their inodes (bench.common.file_system)
        renders.append(timed([mt, "--config", str(small), "--now", NOW, "render", "--out",
                              str(tmp / f"units-{i}")]))
    fires = count_fires(tmp / "plan.json")
    size = (tmp / "plan.json").stat().st_size
    ahead_fires = count_fires(tmp / "ahead.json")
    units = int(re.search(r"(\d+) units for", renders[0]["out"]).group(1))
    built, failed, sessions = (int(x) for x in base[0]["out"].split())
    prof = tmp / "plan.prof"
    subprocess.run([PY, "-m", "cProfile", "-o", str(prof), "-m", "market_timers",
                    *plan_argv[1:]], stdout=subprocess.DEVNULL, check=True)
    top = top_functions(prof)
    bw, bc, br = median(base, "wall"), median(base, "cpu"), median(base, "rss")
    pw, pc, pr = median(plans, "wall"), median(plans, "cpu"), median(plans, "rss")
    aw, ac, ar = median(aheads, "wall"), median(aheads, "cpu"), median(aheads, "rss")
    rw, rc, rr = median(renders, "wall"), median(renders, "cpu"), median(renders, "rss")
    s.add(table(["what", "fires", "wall s", "cpu s", "peak RSS MiB", "wall ×", "cpu ×", "RSS ×"], [
        [f"baseline: build {built} calendars {FROM}..{TO} (exchange_calendars alone)", "",
         bw, bc, br, 1.0, 1.0, 1.0],
        [f"`plan --json`, {n_cals} calendars × open, close, {FROM}..{TO}", fires, pw, pc, pr,
         pw / bw, pc / bc, pr / br],
        ["`plan --json`, 10 calendars × 10 jobs × 250 sessions", ahead_fires, aw, ac, ar,
         1.0, 1.0, 1.0],
        [f"`render --out` of the same ({units} units)", ahead_fires, rw, rc, rr,
         rw / aw, rc / ac, rr / ar],
    ]))
    s.add(f"Medians of {REPEATS} runs each, taken in turns. The baseline built {built} "
          f"calendars ({failed} could not be built; {sessions:,} sessions); the plan's JSON is "
          f"{size / 2**20:.0f} MiB, written entry by entry. Ratios: the plan to the baseline, "
          "render to `plan --json` of the same config and instant.")
    s.add("cProfile of the plan (all calendars, 10 years), top functions by own time:\n\n"
          + table(["function", "calls", "own s", "cumulative s", "share"], top))
    # Time is CPU time (user + sys): every command here is one CPU-bound process, and on a
    # shared machine its wall clock measures the others' load as much as its own work (the
    # wall-clock ratios are in the table and the check's text).
    plan_ok = pc <= PLAN_GOAL * bc and pr <= PLAN_GOAL * br
    s.checks.append(Check(
        f"plan --json of every calendar over 10 years ≤ {PLAN_GOAL}× the time (CPU) and memory "
        "of building those calendars", plan_ok,
        f"{fires:,} fires: {pc:.1f} s CPU / {pr:.0f} MiB vs baseline {bc:.1f} s / {br:.0f} MiB "
        f"(×{pc / bc:.2f} time, ×{pr / br:.2f} memory; wall {pw:.1f} s vs {bw:.1f} s, "
        f"×{pw / bw:.2f})"))
    s.checks.append(Check(
        f"render of ~50k units ≤ {RENDER_GOAL:.0f}× the time (CPU) of plan --json of the same "
        "fires", rc <= RENDER_GOAL * ac,
        f"{units:,} units: {rc:.1f} s CPU vs plan --json {ac:.1f} s (×{rc / ac:.1f}; wall "
        f"{rw:.1f} s vs {aw:.1f} s, ×{rw / aw:.1f}), {rr:.0f} MiB"))
    s.headline.append(f"plan --json {n_cals} calendars × 10 years ({fires:,} fires): {pw:.1f} s, "
                      f"{pr:.0f} MiB (baseline {bw:.1f} s, {br:.0f} MiB); render {units:,} "
                      f"units {rw:.1f} s (plan {aw:.1f} s)")
    s.commands += [
        "# every-calendar config: an open and a close job per calendar "
        "(bench/plan_scale.py:calendar_config)",
        f"/usr/bin/time -v .venv/bin/python -c BASELINE {FROM} {TO}   # bench/plan_scale.py",
        f"/usr/bin/time -v .venv/bin/market-timers --config CONFIG plan --from {FROM} --to {TO} "
        "--json > plan.json",
        f"/usr/bin/time -v .venv/bin/market-timers --config C10x10x250 --now {NOW} plan --json "
        "> ahead.json",
        f"/usr/bin/time -v .venv/bin/market-timers --config C10x10x250 --now {NOW} render "
        "--out DIR",
        f".venv/bin/python -m cProfile -o plan.prof -m market_timers --config CONFIG plan "
        f"--from {FROM} --to {TO} --json",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
