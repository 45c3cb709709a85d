"""Sync on systemd (container): first sync, steady-state re-sync, a simulated daily refresh, each
timed against the number of units systemd has loaded, with the daemon-reloads each one did; and
what a bare `systemctl daemon-reload` costs at ~1k and ~3k loaded units.

Run alone: .venv/bin/python -m bench.sync_systemd
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, table

NAME = "sync_systemd"
NEEDS_CONTAINER = True
# (jobs, horizon in sessions): timers = jobs x horizon, each with its .service
POINTS = [(8, 10), (20, 25), (30, 50)]
STEADY_RUNS = 3
RELOAD_RUNS = 3


def config_text(jobs: int, horizon: int, now: float) -> str:
    """24/7 calendar; fires 3 h + i s after now's time of day, so none fires during the bench."""
    tod = int(now) % 86400 + 3 * 3600
    lines = ['calendar = "24/7"', f"horizon = {horizon}", ""]
    for i in range(jobs):
        off = (tod + i) % 86400
        h, rest = divmod(off, 3600)
        m, sec = divmod(rest, 60)
        lines += ["[[job]]", f'name = "sync{i:02d}"', 'event = "open"',
                  f'offset = "+{h}h{m}min{sec}s"', 'command = ["/bin/true"]', ""]
    return "\n".join(lines)


def timed(box, argv: list[str], timeout: float = 600) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = box.run(argv, timeout=timeout).stdout
    return time.perf_counter() - t0, out


def reloads(box) -> int:
    time.sleep(0.3)  # let PID 1's "Reloading." reach the journal
    return box.daemon_reloads()


def run(box) -> Section:
    from bench.box import CONFIG, clear_market_units, loaded_units, now_inside

    s = Section(NAME, "4. Sync on systemd (container)")
    rows, reload_rows = [], []
    steady_reloads_total = 0
    for jobs, horizon in POINTS:
        clear_market_units(box)
        base_units = loaded_units(box)
        now = now_inside(box)
        box.write_file(CONFIG, config_text(jobs, horizon, now))
        r0 = reloads(box)
        first_s, out = timed(box, ["market-timers", "sync"])
        written = sum(1 for line in out.splitlines() if line.startswith("write "))
        r1 = reloads(box)
        units = loaded_units(box)
        steady = []
        for _ in range(STEADY_RUNS):
            t, out = timed(box, ["market-timers", "sync"])
            steady.append(t)
        r2 = reloads(box)
        steady_reloads_total += r2 - r1
        steady_out = out.strip().splitlines()
        tomorrow = (datetime.fromtimestamp(now, UTC) + timedelta(days=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        daily_s, out = timed(box, ["market-timers", "--now", tomorrow, "sync"])
        daily_written = sum(1 for line in out.splitlines() if line.startswith("write "))
        r3 = reloads(box)
        units_after = loaded_units(box)
        rows += [
            [f"{jobs}×{horizon}", "first sync", written, base_units, units, first_s, r1 - r0],
            [f"{jobs}×{horizon}", f"re-sync, nothing changed (median of {STEADY_RUNS})", 0,
             units, units, statistics.median(steady), r2 - r1],
            [f"{jobs}×{horizon}", "daily refresh (`--now` +1 day: next session added)",
             daily_written, units, units_after, daily_s, r3 - r2],
        ]
        if steady_out != ["nothing to do"]:
            s.add(f"Note: at {jobs}×{horizon} the steady re-sync printed: `{steady_out[:3]}`")
        dr = []
        for _ in range(RELOAD_RUNS):
            t, _ = timed(box, ["systemctl", "daemon-reload"])
            dr.append(t)
        reload_rows.append([f"{jobs}×{horizon}", units_after, statistics.median(dr), min(dr),
                            max(dr)])
    clear_market_units(box)
    s.add(table(["jobs × sessions", "sync", "unit files written", "units loaded before",
                 "units loaded after", "wall s", "daemon-reloads"], rows))
    s.add(table(["jobs × sessions", "units loaded (NNames)", "daemon-reload median s", "min s",
                 "max s"], reload_rows))
    s.add("Wall time is measured on the host around `nsenter ... market-timers sync` (so it "
          "includes the CLI's start and its pandas / exchange_calendars imports). Reloads are "
          "PID 1's `Reloading.` journal lines (`journalctl _PID=1 MESSAGE=Reloading.`): systemd "
          "252 has no reload counter property. Loaded units = `systemctl show -p NNames` (all "
          "units PID 1 holds, the system's own included). The daily refresh is the same sync "
          "run with `--now` one day ahead, which adds the next session's timers.")
    per_k = [(r[1], r[2]) for r in reload_rows]
    s.add("Horizon: a default horizon of 10 sessions keeps ~2 units (timer + service) × jobs × 10 "
          "loaded; at the measured cost a daemon-reload at "
          + ", ".join(f"{u} units takes {t:.2f} s" for u, t in per_k)
          + ". Sync itself needs no reload unless a unit's text changes (see the rows above).")
    s.checks.append(Check("steady-state re-sync does zero daemon-reloads",
                          steady_reloads_total == 0,
                          f"{steady_reloads_total} reload(s) over {STEADY_RUNS} re-syncs at each "
                          f"of {len(POINTS)} sizes"))
    first_rows = [r for r in rows if r[1] == "first sync"]
    s.headline.append(
        "sync: first " + ", ".join(f"{r[0]} {r[5]:.1f} s" for r in first_rows)
        + f"; steady re-sync reloads: {steady_reloads_total}; daemon-reload "
        + ", ".join(f"{u} units {t:.2f} s" for u, t in per_k))
    s.commands += [
        "# config: calendar \"24/7\", J jobs sync00.., horizon H, fires 3 h ahead "
        "(bench/sync_systemd.py:config_text)",
        "market-timers sync                       # first, then 3x again (steady state)",
        "market-timers --now <now+1 day> sync     # the next day's refresh",
        "journalctl -o cat _PID=1 MESSAGE=Reloading. | wc -l   # before/after each",
        "systemctl show --value -p NNames",
        "time systemctl daemon-reload             # x3 per size",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
