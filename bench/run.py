"""`make bench`: run every benchmark and write bench/RESULTS.md.

    .venv/bin/python bench/run.py                 # all of them (~35-40 min: the alternatives'
                                                  # 6 x 100 fires take 26 min of it)
    .venv/bin/python bench/run.py --only NAME     # one (NAME: see --list); RESULTS.md is rewritten
                                                  # with that section only

Prerequisites: hyperfine and /usr/bin/time on the host (`apt-get install hyperfine time`), gcc
for the alternatives' static stamp program and the Python package index for their APScheduler; for the container
benchmarks root, systemd-container (systemd-nspawn), debootstrap and apt-utils, as for the e2e
tests. One Debian 12 container is booted for all container benchmarks, from a fresh copy of the
cached e2e rootfs, with the .deb (`make deb DIST=bookworm`, built in a Debian 12 container, reused
when fresh) installed once.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, Check, Section, machine, remove_deferred

ORDER = ["runner_overhead", "cluster_claim", "plan_render", "plan_scale", "metrics_scale",
         "fire_lateness", "alternatives", "sync_systemd", "alert_latency", "miss_detection",
         "event_flood", "event_command", "scale"]
RESULTS = REPO / "bench" / "RESULTS.md"
PREREQUISITES = {"hyperfine": "apt-get install hyperfine", "/usr/bin/time": "apt-get install time"}


def check_prerequisites() -> list[str]:
    return [f"{tool} missing ({fix})" for tool, fix in PREREQUISITES.items()
            if shutil.which(tool) is None]


def run_one(module, box) -> Section:
    start = time.monotonic()
    try:
        if module.NEEDS_CONTAINER and box is None:
            raise RuntimeError("the container could not be booted")
        section = module.run(box)
    except Exception as e:  # one broken benchmark must not lose the others' figures
        section = Section(module.NAME, f"{module.NAME}: FAILED TO RUN")
        section.checks.append(Check(module.NAME, None, f"{type(e).__name__}: {e}"))
        section.add("```\n" + traceback.format_exc()[-3000:] + "\n```")
        print(traceback.format_exc(), file=sys.stderr)
    section.seconds = time.monotonic() - start
    print(f"[bench] {module.NAME}: {section.seconds:.0f} s\n{section.markdown()}", flush=True)
    return section


def render(sections: list[Section], info: dict[str, str], total: float, argv: list[str]) -> str:
    out = ["# market-timers benchmarks", "",
           f"Produced by `{' '.join(argv)}` (`make bench`) on {info['date']}, in one run of "
           f"{total / 60:.1f} min, at commit {info['commit']}.", "",
           f"Machine: nproc **{info['nproc']}**, CPU **{info['cpu']}**, kernel {info['kernel']}, "
           f"temporary files on {info.get('fs', 'unknown')}, load average at start "
           f"{info['loadavg']} (a shared, noisy machine: figures are medians/percentiles of "
           "repeated runs, never single samples).", "",
           "## Headline figures", ""]
    for s in sections:
        out += [f"- {h}" for h in s.headline]
    out += ["", "## Goals", ""]
    for s in sections:
        out += [c.line() for c in s.checks]
    out.append("")
    for s in sections:
        out.append(s.markdown())
    return "\n".join(out)


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", choices=ORDER, metavar="NAME",
                   help="run only this benchmark (repeatable)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    # `kill` (SIGTERM) unwinds like Ctrl-C: the shared container is powered off and its copy of
    # the rootfs removed by shared_box's exit, instead of being left running.
    signal.signal(signal.SIGTERM, _interrupted)
    if args.list:
        print("\n".join(ORDER))
        return 0
    missing = check_prerequisites()
    if missing:
        print("bench: " + "; ".join(missing), file=sys.stderr)
        return 2
    names = [n for n in ORDER if not args.only or n in args.only]
    modules = [importlib.import_module(f"bench.{n}") for n in names]
    info = machine()
    start = time.monotonic()
    # The container benchmarks measure lateness in milliseconds: they run first, while the
    # machine is quietest; the host ones (judged on medians and CPU time) follow.
    sections: list[Section] = []
    try:
        boxed = [m for m in modules if m.NEEDS_CONTAINER]
        if boxed:
            from bench.box import shared_box

            try:
                with shared_box() as box:
                    sections += [run_one(m, box) for m in boxed]
            except Exception as e:
                done = {s.name for s in sections}
                for m in boxed:
                    if m.NAME not in done:
                        sec = Section(m.NAME, f"{m.NAME}: NOT MEASURED")
                        sec.checks.append(Check(m.NAME, None,
                                                f"container: {type(e).__name__}: {e}"))
                        sections.append(sec)
                traceback.print_exc()
        sections += [run_one(m, None) for m in modules if not m.NEEDS_CONTAINER]
    finally:
        remove_deferred()  # the trees the benchmarks wrote, once none is timed
    sections.sort(key=lambda s: ORDER.index(s.name))
    shown = ["bench/run.py"] + (sys.argv[1:] if argv is None else argv)
    args.out.write_text(render(sections, info, time.monotonic() - start, shown))
    print(f"[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
