"""Plan + render (host): `market-timers --now ... render --out DIR` as a fresh process (imports
count), 1 calendar x 8 jobs x 30 sessions, then a scale curve up to 10 calendars x 10 jobs x
250 sessions: wall time and peak RSS per point.

Run alone: .venv/bin/python -m bench.plan_render
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import VENV_BIN, Check, Section, scratch_dir, table

NAME = "plan_render"
NEEDS_CONTAINER = False
GOAL_S = 1.5
NOW = "2026-01-05T00:00:00Z"  # a Monday, so each calendar's next sessions are ordinary ones
CALENDARS = ["XNYS", "XLON", "XTKS", "XHKG", "XFRA", "XASX", "XTSE", "XSWX", "XPAR", "XAMS"]
# (calendars, jobs per calendar, sessions, repeats)
HEADLINE = (1, 8, 30, 7)
CURVE = [(1, 10, 10, 3), (1, 10, 100, 3), (3, 10, 100, 2), (5, 10, 250, 1), (10, 10, 250, 1)]
EVENTS = [("open", "-30min"), ("open", "+0s"), ("open", "+5min"), ("close", "-15min"),
          ("close", "-10min"), ("close", "+5min"), ("close", "+30min"), ("open", "+1h"),
          ("close", "-1h"), ("open", "+2h")]


def write_config(path: Path, calendars: int, jobs: int, sessions: int) -> None:
    lines = [f'calendar = "{CALENDARS[0]}"', f"horizon = {sessions}", ""]
    for c in range(calendars):
        for j in range(jobs):
            event, offset = EVENTS[j % len(EVENTS)]
            lines += ["[[job]]", f'name = "j{c}-{j}"', f'calendar = "{CALENDARS[c]}"',
                      f'event = "{event}"', f'offset = "{offset}"',
                      'command = ["/usr/local/bin/step", "x"]', ""]
    path.write_text("\n".join(lines))


def measure(config: Path, out: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, units written) of one fresh `market-timers render` into `out`, a
    directory that does not exist yet (nothing is deleted between runs: bench.common.scratch_dir).
    """
    argv = ["/usr/bin/time", "-v", str(VENV_BIN / "market-timers"), "--config", str(config),
            "--now", NOW, "render", "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    units = int(re.search(r"(\d+) units for", proc.stdout).group(1))
    return wall, rss / 1024, units


def plan_only(config: Path) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of `market-timers plan --json` alone: the plan without rendering."""
    argv = ["/usr/bin/time", "-v", str(VENV_BIN / "market-timers"), "--config", str(config),
            "--now", NOW, "plan", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return wall, rss / 1024


def profile_share(config: Path, out: Path) -> tuple[float, float, float]:
    """cProfile of one render: (total s, s in jinja2 Environment.compile, s in os.fsync)."""
    import pstats

    prof = out.parent / "render.prof"
    subprocess.run([str(VENV_BIN / "python"), "-m", "cProfile", "-o", str(prof), "-m",
                    "market_timers", "--config", str(config), "--now", NOW, "render", "--out",
                    str(out)], capture_output=True, text=True, check=True)
    stats = pstats.Stats(str(prof)).stats
    total = compile_s = fsync_s = 0.0
    for (file, _line, func), (_cc, _nc, tt, ct, _callers) in stats.items():
        total += tt
        if func == "compile" and file.endswith("jinja2/environment.py"):
            compile_s = ct
        if "fsync" in func:
            fsync_s += ct
    return total, compile_s, fsync_s


def run(_box=None) -> Section:
    s = Section(NAME, "3. Plan + render (host, fresh process, imports included)")
    rows = []
    head = None
    tmp = scratch_dir("mt-bench-render-")
    for point in [HEADLINE, *CURVE]:
        cals, jobs, sessions, repeats = point
        cfg = tmp / f"c{cals}-j{jobs}-s{sessions}.toml"
        write_config(cfg, cals, jobs, sessions)
        samples = [measure(cfg, tmp / f"out-{cfg.stem}-{i}") for i in range(repeats)]
        walls = [w for w, _, _ in samples]
        rss = statistics.median(r for _, r, _ in samples)
        units = samples[0][2]
        row = [cals, jobs, sessions, units // 2, units, repeats, statistics.median(walls),
               min(walls), max(walls), rss, statistics.median(walls) / (units / 2) * 1000]
        rows.append(row)
        if point is HEADLINE:
            head = row
    big_cfg = tmp / "c10-j10-s250.toml"
    plan_wall, plan_rss = plan_only(big_cfg)
    prof_cfg = tmp / "c1-j10-s100.toml"
    total, compile_s, fsync_s = profile_share(prof_cfg, tmp / "out-profile")
    s.add(table(["calendars", "jobs/cal", "sessions", "fires", "units written", "runs",
                 "median wall s", "min s", "max s", "peak RSS MiB", "ms per fire"], rows))
    s.add("Each run is a fresh `market-timers render` process, so the figures include the "
          "interpreter start and the pandas / exchange_calendars imports; `render` plans, renders "
          "the jinja2 templates and writes each unit atomically (temp file + rename; one "
          "syncfs at the end) into a new directory.")
    s.add(f"Plan alone at 10×10×250 (`plan --json`, same fresh process): {plan_wall:.1f} s, "
          f"{plan_rss:.0f} MiB; so rendering + writing is {rows[-1][6] - plan_wall:.0f} s of the "
          f"{rows[-1][6]:.0f} s there.")
    s.add(f"cProfile of one render at 1×10×100 (1,000 fires, 2,000 units): {total:.1f} s in all, "
          f"of which **{compile_s:.1f} s ({compile_s / total:.0%}) compiling the jinja2 templates** "
          f"and {fsync_s:.1f} s ({fsync_s / total:.0%}) in fsync (each unit is written with "
          "temp file + rename, and one syncfs makes them durable). The templates are compiled "
          "once per process.")
    med = head[6]
    s.checks.append(Check(f"1 calendar × 8 jobs × 30 sessions ≤ {GOAL_S} s", med <= GOAL_S,
                          f"{med:.2f} s median of {HEADLINE[3]} ({head[4]} units), "
                          f"peak RSS {head[9]:.0f} MiB"))
    big = rows[-1]
    s.headline.append(f"render 1×8×30: {med:.2f} s median, {head[9]:.0f} MiB; 10×10×250 "
                      f"({big[4]} units): {big[6]:.1f} s, {big[9]:.0f} MiB")
    s.commands += [
        "# config: N calendars (XNYS XLON XTKS ...), M jobs each, horizon = sessions; "
        "written by bench/plan_render.py:write_config",
        f"/usr/bin/time -v .venv/bin/market-timers --config CONFIG --now {NOW} render --out DIR",
        f"/usr/bin/time -v .venv/bin/market-timers --config CONFIG --now {NOW} plan --json",
        f".venv/bin/python -m cProfile -o render.prof -m market_timers --config CONFIG --now {NOW} "
        "render --out DIR",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
