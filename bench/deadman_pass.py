"""The dead-man pass, `status` and `status --html` at N jobs (host, in-process; issue 46 items 3
and 4). The CPU of each, median of 5, over the plan of N jobs on a 24/7 calendar at the default
horizon, a week of past sessions all run (a run record each), nothing due: the first pass (no
page, nothing judged yet), the idle pass the dead-man's timer makes every minute, and the pass
after a sync (the plan written again, as the daily refresh does: every upcoming timer read once,
the page rebuilt). systemd's answers are faked (PID 1's part is bench/scale.py's); the fake
counts the units a pass asks about. `status --html` is also measured as its own process (the
interpreter's start and imports included: what a user waits for), median of 3 after one.

Run alone: .venv/bin/python -m bench.deadman_pass [N ...]   (default 10 100 1000)
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ensure_repo_on_path  # noqa: E402
from bench.scale import config_text  # noqa: E402

ensure_repo_on_path()

SIZES = (10, 100, 1000)
REPEAT = 5
DAYS_RUN = 7  # past sessions in the plan, each run


class WaitingTimers:
    """systemctl as the dead-man and status see it: every timer waiting; counts what is asked."""

    def __init__(self):
        self.asked = 0

    def show(self, units, props):
        units = list(units)
        self.asked += len(units)
        return {u: {"Id": u, "LoadState": "loaded", "ActiveState": "active",
                    "SubState": "waiting"} for u in units}

    def failed_units(self, patterns):
        return []  # no unit failed (one listing by state: no unit asked about by name)


def setup(tmp: Path, jobs: int, now: datetime):
    """A config of `jobs` jobs, its plan (DAYS_RUN sessions back, the horizon ahead) and a
    success record of every past fire."""
    from market_timers.config.loader import load
    from market_timers.contracts import planfile
    from market_timers.ledger import runrecord
    from market_timers.schedule import plan as planning
    from market_timers.schedule.planmerge import write_plan

    (tmp / "www").mkdir()
    config_file = tmp / "c.toml"
    config_file.write_text(f'state_dir = "{tmp}/state"\npage_dir = "{tmp}/www"\n'
                           f'spool_dir = "{tmp}/spool"\n' + config_text(jobs, now.timestamp()))
    config = load(config_file)
    then = now - timedelta(days=DAYS_RUN)
    write_plan(config, planning.plan_ahead(config, then), then, None)
    write_plan(config, planning.plan_ahead(config, now), now, planfile.read(config.state_dir))
    for e in planfile.read(config.state_dir).entries:
        if e.instant <= now:
            at = e.instant.strftime("%Y-%m-%dT%H:%M:%SZ")
            runrecord.update(config.state_dir, e.job, e.session, scheduled_utc=at,
                             started_utc=at, result="success", exit_code="exited",
                             exit_status="0", duration_sec=1)
            # its key written when it ran, not while this set-up runs
            ran = e.instant.timestamp() + 1
            os.utime(tmp / "state" / "ledger" / e.job / e.session, (ran, ran))
    return config


def cpu(call) -> float:
    """CPU seconds of one call, as if it were its own process (a pass is: nothing kept from
    the previous one, such as plan.json read once per process)."""
    from market_timers.watch import fires

    getattr(fires, "_read", {}).clear()
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        call()
    return time.process_time() - start


def resync(config, at: datetime) -> None:
    """What the daily refresh does to the plan: written again (a new generated_utc), so the
    next pass reads every upcoming timer once and rebuilds the page."""
    from market_timers.contracts import planfile
    from market_timers.schedule import plan as planning
    from market_timers.schedule.planmerge import write_plan

    write_plan(config, planning.plan_ahead(config, at), at, planfile.read(config.state_dir))


def process_cpu(config_file: Path, *args: str) -> float:
    """CPU seconds of `market-timers status ARGS` as its own process (interpreter, imports)."""
    import resource
    import subprocess

    # with its bytecode cached, as the package installs it (not recompiled at every start)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "market_timers", "--config", str(config_file),
                    "status", *args], check=True, capture_output=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def measure(jobs: int) -> dict:
    from market_timers.watch import deadman, status

    now = datetime.now(UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        config = setup(Path(tmp), jobs, now)
        fake = WaitingTimers()
        status.Systemctl = deadman.Systemctl = lambda: fake
        ticks = iter(now + timedelta(minutes=i) for i in range(1, 100))
        first = cpu(lambda: deadman.command(config, next(ticks)))
        first_asked, fake.asked = fake.asked, 0
        passes = [cpu(lambda: deadman.command(config, next(ticks))) for _ in range(REPEAT)]
        asked, fake.asked = fake.asked / REPEAT, 0
        synced = next(ticks)
        resync(config, synced)
        after_sync = cpu(lambda: deadman.command(config, next(ticks)))
        after_asked = fake.asked
        table = [cpu(lambda: status.command(config, now=now, systemctl=fake))
                 for _ in range(REPEAT)]
        page = [cpu(lambda: status.command(config, now=now, html=f"{tmp}/s.html",
                                           systemctl=fake)) for _ in range(REPEAT)]
        html_process = statistics.median([process_cpu(Path(tmp) / "c.toml", "--html",
                                                      f"{tmp}/p.html") for _ in range(4)][1:])
    return {"first": first, "first_asked": first_asked, "pass": statistics.median(passes),
            "asked": asked, "after_sync": after_sync, "after_asked": after_asked,
            "status": statistics.median(table), "html": statistics.median(page),
            "html_process": html_process}


def main(argv: list[str]) -> None:
    print("jobs | first pass (no page yet), CPU s (units asked) | next passes, median CPU s "
          "(units asked) | pass after a sync, CPU s (units asked) | status | status --html | "
          "status --html as a process, CPU s")
    for jobs in [int(a) for a in argv] or SIZES:
        m = measure(jobs)
        print(f"{jobs} | {m['first']:.3f} ({m['first_asked']}) | {m['pass']:.3f} "
              f"({m['asked']:.0f}) | {m['after_sync']:.3f} ({m['after_asked']}) | "
              f"{m['status']:.3f} | {m['html']:.3f} | {m['html_process']:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
