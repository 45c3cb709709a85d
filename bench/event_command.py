"""`market-timers event` from a shell (host): the median wall time of N calls that spool one
event each, beside the bare interpreter's start (`python -c pass`) and `python -I -S -c pass`.
What is left above the interpreter is the command's own cost: the parser and the spool write.
Beside it, the in-process call a job or a gateway makes (jobnotify.event's spool write, fsync
included), which is what "a few ms" can mean for a Python caller.

Run alone: .venv/bin/python -m bench.event_command [N]   (default 30)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, ensure_repo_on_path, scratch_dir, table  # noqa: E402

ensure_repo_on_path()

NAME = "event_command"
NEEDS_CONTAINER = False
CALLS = 30


def _median_ms(argv: list[str], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run(_box=None, n: int = CALLS) -> Section:
    s = Section(NAME, "`market-timers event`: a shell's call, median of N")
    s.commands.append(f"python -m bench.event_command {n}")
    root = scratch_dir("event-command-")
    for d in ("spool/events", "run/events"):
        (root / d).mkdir(parents=True)
    config = root / "market-timers.toml"
    config.write_text(f'spool_dir = "{root / "spool"}"\nruntime_dir = "{root / "run"}"\n')
    cli = Path(sys.executable).with_name("market-timers")
    rows = [("python -I -S -c pass", _median_ms([sys.executable, "-I", "-S", "-c", "pass"], n)),
            ("python -c pass", _median_ms([sys.executable, "-c", "pass"], n)),
            ("market-timers event", _median_ms([str(cli), "--config", str(config), "event",
                                                "bench.kind", "--key", "k", "--text", "t"], n))]
    spooled = len(list((root / "spool/events").iterdir()))
    from market_timers.events import spool

    times = []
    for i in range(n):
        start = time.perf_counter()
        spool.write(spool.make_event("bench.kind", key=f"k{i}", text="t"),
                    [str(root / "run/events")])
        times.append((time.perf_counter() - start) * 1000)
    rows.append(("in process (jobnotify.event's write)", statistics.median(times)))
    s.add(table(["command", "median (ms)"], [[what, f"{ms:.1f}"] for what, ms in rows]))
    own = rows[2][1] - rows[1][1]
    s.add(f"Above the interpreter's start: {own:.1f} ms; {spooled} events spooled.")
    s.checks.append(Check("every call spooled its event", spooled == n, f"{spooled} of {n}"))
    return s


if __name__ == "__main__":
    print(run(n=int(sys.argv[1]) if sys.argv[1:] else CALLS).markdown())
