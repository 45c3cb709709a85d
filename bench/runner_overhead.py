"""Runner overhead (host): `market-timers-run -- /bin/true` vs `/bin/true`, with hyperfine;
the runner's peak RSS (/usr/bin/time -v); and a check that its imports never include pandas.

Run alone: .venv/bin/python -m bench.runner_overhead
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import PY, VENV_BIN, Check, Section, table

NAME = "runner_overhead"
NEEDS_CONTAINER = False
GOAL_MS = 40.0
RUNS = 60
RSS_RUNS = 15
HEAVY = ("pandas", "numpy", "exchange_calendars", "jinja2")


def runner_env(tmp: Path) -> dict[str, str]:
    """What a generated unit's Environment= gives the runner (grace large: never a stale start)."""
    return {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
        "MARKET_JOB": "bench", "MARKET_SESSION": "2026-01-05",
        "MARKET_SCHEDULED_UTC": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "MARKET_GRACE_SEC": str(10**9), "MARKET_LOCK_GROUP": "bench",
        "MARKET_LOCK_DIR": str(tmp / "run"), "MARKET_STATE_DIR": str(tmp / "state"),
    }


def hyperfine(commands: list[str], env: dict[str, str], out: Path,
              prepare: str | None = None) -> dict[str, dict]:
    cmd = ["hyperfine", "--shell=none", "--warmup", "5", "--runs", str(RUNS),
           "--export-json", str(out), *commands]
    if prepare:  # run before every timed run (and warm-up), not timed
        cmd[1:1] = ["--prepare", prepare]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return {r["command"]: r for r in json.loads(out.read_text())["results"]}


def peak_rss_kb(argv: list[str], env: dict[str, str], before: Path | None = None) -> int:
    if before is not None:  # a fresh session for the runner (see run())
        shutil.rmtree(before, ignore_errors=True)
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], env=env, capture_output=True,
                          text=True, check=True)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if not m:
        raise RuntimeError(f"no RSS in /usr/bin/time -v output:\n{proc.stderr}")
    return int(m.group(1))


def imported_modules(env: dict[str, str], runner: str) -> list[str]:
    """Top-level packages the runner imports, from `python -X importtime` (before the exec)."""
    code = f"import sys; sys.argv = ['{runner}', '--', '/bin/true']; " \
           "from market_timers.run import main; sys.exit(main())"
    proc = subprocess.run([PY, "-X", "importtime", "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    mods = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.append(name)
    return mods


def run(_box=None) -> Section:
    s = Section(NAME, "2. Runner overhead (host)")
    runner = str(VENV_BIN / "market-timers-run")
    if shutil.which("/usr/bin/time") is None:
        s.checks.append(Check("peak RSS", None, "/usr/bin/time missing (apt-get install time)"))
    with tempfile.TemporaryDirectory(prefix="mt-bench-runner-") as d:
        tmp = Path(d)
        env = runner_env(tmp)
        # Each run must claim a session of its own in the run ledger (a second start of one
        # session exits 173 before the lock and the claim): forget the bench job's session, as a
        # new session would find it (ledger/ and ledger/bench/ exist, the session's dir does not).
        session_dir = tmp / "state" / "ledger" / "bench" / env["MARKET_SESSION"]
        res = hyperfine([f"{runner} -- /bin/true", "/bin/true", f"{PY} -S -c pass"], env,
                        tmp / "hf.json", prepare=f"rm -rf {session_dir}")
        med_py = res[f"{PY} -S -c pass"]["median"] * 1000
        r_run, r_true = res[f"{runner} -- /bin/true"], res["/bin/true"]
        med_run, med_true = r_run["median"] * 1000, r_true["median"] * 1000
        rss = [peak_rss_kb([runner, "--", "/bin/true"], env, before=session_dir)
               for _ in range(RSS_RUNS)]
        rss_py = [peak_rss_kb([PY, "-c", "pass"], env) for _ in range(RSS_RUNS)]
        rss_true = [peak_rss_kb(["/bin/true"], env) for _ in range(RSS_RUNS)]
        shutil.rmtree(session_dir, ignore_errors=True)
        mods = imported_modules(env, runner)
    heavy = sorted({m.split(".")[0] for m in mods if m.split(".")[0] in HEAVY})
    ours = sorted(m for m in mods if m.startswith("market_timers"))
    rows = [
        [f"`{runner.replace(str(VENV_BIN), '.venv/bin')} -- /bin/true`", med_run,
         r_run["mean"] * 1000, r_run["stddev"] * 1000, r_run["min"] * 1000,
         max(r_run["times"]) * 1000, statistics.median(rss) / 1024],
        ["`/bin/true`", med_true, r_true["mean"] * 1000, r_true["stddev"] * 1000,
         r_true["min"] * 1000, max(r_true["times"]) * 1000, statistics.median(rss_true) / 1024],
        ["`python -c pass` (same venv, RSS reference)", "", "", "", "", "",
         statistics.median(rss_py) / 1024],
    ]
    s.add(table(["command", "median ms", "mean ms", "stddev ms", "min ms", "max ms",
                 f"peak RSS MiB (median of {RSS_RUNS})"], rows))
    overhead = med_run - med_true
    s.add(f"Runner overhead (median difference): **{overhead:.1f} ms**; ratio runner/true = "
          f"**{med_run / med_true:.0f}×** (runs per command: {RUNS}, after 5 warm-ups). "
          f"`python -S -c pass` (the interpreter's own start, no site) is the floor a Python runner "
          f"cannot go under: {med_py:.1f} ms. Each timed run also claims a fresh session in the run "
          "ledger before it execs (its directory and `attempt-1` created and fsync'd, on the "
          "temporary directory's file system), as a timer's start does.")
    s.add(f"Modules imported by the runner (`python -X importtime`): {len(mods)} in all; "
          f"market_timers modules: {', '.join(ours)}; heavy packages "
          f"({', '.join(HEAVY)}) imported: {', '.join(heavy) or 'none'}.")
    s.checks.append(Check(f"runner start-to-exec ≤ {GOAL_MS:.0f} ms (median)",
                          med_run <= GOAL_MS, f"{med_run:.1f} ms median (overhead over /bin/true "
                          f"{overhead:.1f} ms)"))
    s.checks.append(Check("runner never imports pandas", "pandas" not in heavy,
                          f"heavy imports: {', '.join(heavy) or 'none'}"))
    s.headline.append(f"runner -- /bin/true median {med_run:.1f} ms vs /bin/true "
                      f"{med_true:.2f} ms (×{med_run / med_true:.0f}); peak RSS "
                      f"{statistics.median(rss) / 1024:.1f} MiB; pandas imported: "
                      f"{'yes' if 'pandas' in heavy else 'no'}")
    s.commands += [
        "# env: MARKET_JOB=bench MARKET_SCHEDULED_UTC=<now> MARKET_GRACE_SEC=1000000000 "
        "MARKET_LOCK_DIR=$TMP/run MARKET_STATE_DIR=$TMP/state (what a unit's Environment= gives)",
        f"hyperfine --shell=none --prepare 'rm -rf $TMP/state/ledger/bench/2026-01-05' "
        f"--warmup 5 --runs {RUNS} --export-json hf.json "
        "'.venv/bin/market-timers-run -- /bin/true' '/bin/true' '.venv/bin/python -S -c pass'",
        f"/usr/bin/time -v .venv/bin/market-timers-run -- /bin/true   # x{RSS_RUNS}, "
        "'Maximum resident set size'",
        ".venv/bin/python -X importtime -c 'from market_timers.run import main; ...'",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
