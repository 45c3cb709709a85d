"""The idle dead-man pass as the process market-deadman.timer starts (host; issue 46 item 3).

`market-timers deadman` run as its own process at N jobs, nothing due: the CPU (user + system)
of the process and its children (the interpreter's start, the imports, the config load, the
pass, the status page, the fake systemctl it runs), median of 5, after one first pass (the
timers read once after a sync, the page built). The plan and the run records are
bench/deadman_pass.py's (a 24/7 calendar, a week of past sessions each run, the default horizon
ahead); systemd is a shell script answering every timer "waiting" and no unit failed (PID 1's
own part is bench/scale.py's). The code measured is whatever PYTHONPATH holds, so a `git
archive` of another commit on PYTHONPATH measures that commit ("before").

Run alone: .venv/bin/python -m bench.deadman_process [N ...]   (default 10 100 1000)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ensure_repo_on_path  # noqa: E402
from bench.deadman_pass import setup  # noqa: E402

ensure_repo_on_path()

SIZES = (10, 100, 1000)
REPEAT = 5
# list-units as PID 1 answers it: the units named (or matching a glob); none failed or running
SYSTEMCTL = """#!/bin/sh
case "$*" in *--state=*) exit 0;; *'*'*) exec cat {units};; esac
for unit in "$@"; do
  case "$unit" in
    market-*.timer) echo "$unit loaded active waiting -";;
    market-*.service) echo "$unit loaded inactive dead -";;
  esac
done
"""


def fake_systemctl(tmp: Path) -> Path:
    """A `systemctl` whose list-units shows the package's services inactive and every planned
    timer waiting (a glob: every line of units.txt); a listing by state is empty."""
    from market_timers.contracts import unitname

    plan = json.loads((tmp / "state" / "plan.json").read_text())
    lines = [f"{u} loaded inactive dead -" for u in unitname.PACKAGE_SERVICES]
    lines += [f"{e['unit']} loaded active waiting -" for e in plan["fires"]]
    (tmp / "units.txt").write_text("\n".join(lines) + "\n")
    (tmp / "bin").mkdir()
    script = tmp / "bin" / "systemctl"
    script.write_text(SYSTEMCTL.format(units=tmp / "units.txt"))
    script.chmod(0o755)
    return tmp / "bin"


def process_cpu(config_file: Path, bin_dir: Path, at: datetime) -> float:
    """CPU seconds of `market-timers deadman --now AT` and its children."""
    # with its bytecode cached, as the package installs it (not recompiled at every start)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "market_timers", "--config", str(config_file),
                           "--now", at.strftime("%Y-%m-%dT%H:%M:%SZ"), "deadman"],
                          capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "0 new" not in done.stderr:
        raise RuntimeError(f"the pass was not idle (exit {done.returncode}): "
                           f"{done.stderr[-500:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def measure(jobs: int) -> dict:
    now = datetime.now(UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        setup(Path(tmp), jobs, now)
        bin_dir = fake_systemctl(Path(tmp))
        config_file = Path(tmp) / "c.toml"
        first = process_cpu(config_file, bin_dir, now + timedelta(minutes=1))
        idle = [process_cpu(config_file, bin_dir, now + timedelta(minutes=2 + i))
                for i in range(REPEAT)]
    return {"first": first, "idle": statistics.median(idle), "min": min(idle),
            "max": max(idle)}


def main(argv: list[str]) -> None:
    print("jobs | first pass as a process, CPU s | idle pass as a process, median CPU s "
          f"of {REPEAT} (min-max)")
    for jobs in [int(a) for a in argv] or SIZES:
        m = measure(jobs)
        print(f"{jobs} | {m['first']:.3f} | {m['idle']:.3f} ({m['min']:.3f}-{m['max']:.3f})",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
