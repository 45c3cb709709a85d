"""Fault campaign (issue 23): two nodes and PostgreSQL (containers, Debian 12), N fires of single,
order (shared lock groups) and periodic jobs, faults injected at random times from a seeded RNG
(kill -9 of a runner, a node powered off and booted again, PostgreSQL stopped and started, a
10-30 s stall between a node and the database: its link down, or its connections held by a proxy
that keeps them up, an admin lock on the ledger's tables, a clock step of 10-60 s either way on
one node's job units: the LD_PRELOAD shim tests/fakes/clockshift.c, as the containers share the
host's clock, so that node's systemd timers still fire by the host's clock), and issue 44's: a
halt while the ledger is unreachable, a halt while ny4-b's halt-watch connection is held, a node
whose DSN lost its password, and a primary failover of PostgreSQL (a synchronous streaming
standby made once before the first fire, the primary stopped at once right after a fire's claim
committed, the standby promoted, the old primary made its standby again; each node's DSN names
both servers with target_session_attrs=read-write; tests/e2e/controlfaults.py, pgstandby.py). Counts: fires run twice, fires neither
run nor alerted, fires run later than their grace, alerts that a job failed (every job exits 0),
starts while a halt was in force (all five must be 0), fires refused and alerted, and fires held
by a halt (told by the halt's own alert). The campaign itself:
tests/e2e/campaign.py (a smaller N is
the e2e test tests/e2e/test_cluster.py::test_a_small_fault_campaign...).

Not part of `bench/run.py` (it takes about N x 2 s plus the boots): run it alone, as root,

    .venv/bin/python -m bench.fault_campaign --fires 200 --seed 23 --write

--write replaces (or appends) its section of bench/RESULTS.md, leaving the others as they are.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, Check, Section, commit, ensure_repo_on_path, table

NAME = "fault_campaign"
TITLE = "Fault campaign: two nodes and PostgreSQL under faults (containers, Debian 12)"
RESULTS = REPO / "bench" / "RESULTS.md"
GRACE = 10  # the campaign's jobs' grace, s (run_campaign's default)


def log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def campaign(fires: int, seed: int, spacing: int,
             on_db_unreachable: str | None = None) -> Section:
    ensure_repo_on_path()
    from tests.e2e.campaign import LEFT_OUT, run_campaign
    from tests.e2e.cluster import booted_cluster
    from tests.e2e.container import missing_prerequisite
    from tests.e2e.debpkg import ensure_deb
    from tests.e2e.scenario import TOKEN

    from bench.fake_telegram import StampedFakeApi

    reason = missing_prerequisite()
    if reason:
        raise RuntimeError(f"fault campaign: {reason}")
    deb = ensure_deb("bookworm")
    api = StampedFakeApi(token=TOKEN).start()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        with booted_cluster("bookworm", deb, api) as cluster:
            log("cluster booted")
            cluster.on_db_unreachable = on_db_unreachable
            out = run_campaign(cluster, n=fires, seed=seed, spacing=spacing, grace=GRACE,
                               log=log)
    finally:
        api.stop()
    s = Section(NAME, TITLE)
    s.checks += _checks(out)
    s.headline.append(f"fault campaign: {out.summary()}")
    kinds = Counter(f.job.rstrip("0123456789") for f in out.fires)
    s.add(f"Run on {started}, code {commit()} (the .deb {deb.name} built from it), seed {seed}: "
          f"N = **{len(out.fires)}** fires ("
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
          + f"; single-fire jobs {spacing} s apart, the periodic job every 10 s in lock group "
          "ticks; order jobs in lock groups orders and books; grace 10 s; [cluster] "
          f"on_db_unreachable = {on_db_unreachable or 'skip (the default)'}; nodes connect as "
          f"{'one role each' if cluster.node_roles else 'the owner role'}), "
          f"**{len(out.faults)}** faults.")
    _tables(s, out, LEFT_OUT)
    s.commands.append(f".venv/bin/python -m bench.fault_campaign --fires {fires} --seed {seed} "
                      f"--spacing {spacing}"
                      + (f" --on-db-unreachable {on_db_unreachable}" if on_db_unreachable
                         else "") + " --write")
    return s


def _checks(out) -> list[Check]:
    twice, late, neither = len(out.twice()), len(out.late()), len(out.neither())
    return [Check("no fire runs twice", twice == 0, f"{twice} of {len(out.fires)}"),
                 Check("no fire neither runs nor is alerted", neither == 0,
                       f"{neither} of {len(out.fires)}"),
                 Check("no fire runs later than its grace", late == 0,
                       f"{late} of {len(out.fires)}"),
                 Check("no alert says a job failed (every job exits 0)",
                       out.exit0_failures() == 0,
                       f"{out.exit0_failures()} of {len(out.messages)} messages"),
                 Check("no start while a halt is in force", not out.halted_runs(),
                       f"{len(out.halted_runs())} of {len(out.fires)}")]


def _tables(s: Section, out, left_out: dict) -> None:
    """The counts, the counts per kind of fault, the faults, and what the campaign leaves out."""
    twice, late, neither = len(out.twice()), len(out.late()), len(out.neither())
    s.add(table(["fires", "ran", "ran twice", "ran later than grace", "neither ran nor alerted",
                 "refused and alerted", "held by a halt", "halted jobs run",
                 "messages at the fake Telegram and Slack APIs",
                 "of which 'failed with exit status 0'"],
                [[len(out.fires), out.ran(), twice, late, neither, len(out.refused_alerted()),
                  len(out.held()), len(out.halted_runs()), len(out.messages),
                  out.exit0_failures()]]))
    s.add(f"Per kind of fault, the fires it covered: those whose instant fell from 2 s before "
          f"the fault began (the standby node starts 2 s late) to {GRACE} s (the grace) after "
          "it ended, a fire covered by two going to the later one.")
    s.add(table(["fault kind", "faults", "fires", "ran", "ran twice", "ran later than grace",
                 "neither ran nor alerted", "refused and alerted", "held by a halt",
                 "halted jobs run"],
                [[kind, *row.values()] for kind, row in out.by_fault_kind(GRACE).items()]))
    first = out.fires[0].scheduled
    s.add(table(["at (s after the first fire)", "fault", "node", "lasted s", "what was done"],
                [[f"{f.at - first:.0f}", f.kind, f.node, f.seconds, f.note]
                 for f in out.faults]))
    if out.exit0_failures():
        s.add(f"{out.exit0_failures()} of the messages say a job's unit \"failed with exit status "
              "0\" (critical), although every job of the campaign exits 0: a unit that failed "
              "after its job. Look for status=219/CGROUP in the nodes' journals (the containers' "
              "cgroups, tests/e2e/container.py) or a failed ExecStopPost= record step.")
    s.add("Left out: " + "; ".join(f"{k} ({v})" for k, v in left_out.items()) + ".")
    s.add("The same campaign on the code before issue 23's fixes (c8a7585, the parent of the "
          "first db-faults merge 0275a8b): the section \"Fault campaign on the code before "
          "issue 23's fixes\", written by hand.")


def write_section(section: Section, path: Path = RESULTS) -> None:
    """Replace this benchmark's section of RESULTS.md (or append it)."""
    text = path.read_text() if path.exists() else "# market-timers benchmarks\n"
    head = f"## {TITLE}"
    if head in text:
        before, _, rest = text.partition(head)
        nxt = rest.find("\n## ")
        text = before + section.markdown() + (rest[nxt + 1:] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section.markdown()
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fires", type=int, default=200, help="N, the number of fires (200)")
    p.add_argument("--seed", type=int, default=23, help="the RNG seed of the faults (23)")
    p.add_argument("--spacing", type=int, default=2,
                   help="seconds between two single-fire jobs (2)")
    p.add_argument("--on-db-unreachable", choices=("skip", "run"), default=None,
                   help="write [cluster] on_db_unreachable into the nodes' config (default: "
                        "leave it out, i.e. skip)")
    p.add_argument("--write", action="store_true", help="write the section into RESULTS.md")
    args = p.parse_args(argv)
    start = time.monotonic()
    section = campaign(args.fires, args.seed, args.spacing, args.on_db_unreachable)
    section.seconds = time.monotonic() - start
    print(section.markdown())
    if args.write:
        write_section(section)
        log(f"wrote {RESULTS}")
    ok = all(c.ok for c in section.checks)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
