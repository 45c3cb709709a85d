"""The operator commands' options and their --help texts: `run` (one session, or a backfill with
--from), `pause`, `halt`, `halt-watch` and `resume` (cli/parser.py adds them in its order).
"""

from __future__ import annotations

from market_timers.cli.argtypes import session_date


def add_run(command) -> None:
    s = command("run", "start a job's run for one session now (refused if that session "
                       "already ran, unless --force), or backfill a range of past sessions "
                       "(--from): one at a time, in order, waiting for each")
    s.add_argument("job", metavar="JOB", help="the job's name")
    which = s.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", type=session_date, metavar="DATE",
                       help="the session to run it for")
    which.add_argument("--from", dest="since", type=session_date, metavar="DATE",
                       help="backfill: the job's planned sessions from DATE on, each that did "
                            "not run yet (those that ran are listed)")
    s.add_argument("--force", action="store_true", help="run it again although it already ran "
                   "(--session only)")
    s.add_argument("--yes", action="store_true", help="start it although its planned instant "
                   "has not come (--session only; refused without: the timer's run would then "
                   "be refused)")
    s.add_argument("--to", dest="until", type=session_date, metavar="DATE",
                   help="backfill: the last session (default: the last one before now; a run "
                        "still to come is refused)")
    s.add_argument("--dry-run", action="store_true",
                   help="backfill: show what would run and what already ran, start nothing")
    s.add_argument("--keep-going", action="store_true",
                   help="backfill: go on after a failed run (default: stop at the first)")
    s.add_argument("--downstream", action="store_true",
                   help="backfill: after each session's run succeeded, also run the jobs that "
                        "require it (`requires`), in dependency order, for that session")
    s.add_argument("--json", action="store_true",
                   help="backfill: print the runs (session, job, outcome, detail, unit) as JSON")


def add_controls(command) -> None:
    s = command("pause", "hold a job, or a lock group, out of its sessions until `resume` (or "
                         "--until): its timers' starts are refused (exit 177) and recorded as "
                         "paused, never as missed; root or the config's operator_group only")
    which = s.add_mutually_exclusive_group(required=True)
    which.add_argument("job", metavar="JOB", nargs="?", help="the job to pause")
    which.add_argument("--group", metavar="G", help="pause every job of this lock group")
    s.add_argument("--until", type=session_date, metavar="DATE",
                   help="pause the sessions before DATE only (DATE's session runs)")
    s.add_argument("--note", required=True, metavar="TEXT",
                   help="why: shown with every paused start, in status and the digest")
    s.add_argument("--json", action="store_true",
                   help="print the pause recorded (scope, name, by, since, host, until, note) as "
                        "JSON")
    s = command("halt", "the kill switch: refuse every start (exit 178, the operator's `run` "
                        "too) of the order jobs (orders = true), or of --group, --job or --all, "
                        "stop their running units (on every node with [cluster]) and run on_halt once, until "
                        "`resume`; root or the config's operator_group only (a member's halt is run by "
                        "root's market-controls.service)")
    which = s.add_mutually_exclusive_group()
    which.add_argument("--group", metavar="G", help="halt every job of this lock group")
    which.add_argument("--job", metavar="J", help="halt this job")
    which.add_argument("--all", action="store_true", dest="all_jobs", help="halt every job")
    s.add_argument("--reason", required=True, metavar="TEXT",
                   help="why: in the record, the alert, status and on_halt's environment")
    s.add_argument("--json", action="store_true",
                   help="print the halt (scope, name, new, by, since, host, reason, jobs, "
                        "stopped, on_halt_unit) as JSON")
    s = command("halt-watch", "in a cluster: listen to the cluster ledger and stop this host's "
                              "runs that a halt made on any node covers (the unit "
                              "market-halt-watch.service runs it; root)")
    s.add_argument("--once", action="store_true",
                   help="look once (stop what the halts in force cover), then exit")
    command("take-requests", "root, run by market-controls.service: take the halt, pause and "
                             "resume requests of the operator_group's members (written by "
                             "their own `market-timers halt`, `pause`, `resume`), run each as "
                             "root's command would and answer its owner; refuse and log the "
                             "rest")
    s = command("resume", "end a pause or a halt: of a job, a lock group (also its pause after a "
                          "failure: pause_on_failure), the order jobs (no argument, or --orders) "
                          "or every job (--all)")
    which = s.add_mutually_exclusive_group()
    which.add_argument("job", metavar="JOB", nargs="?", help="the job to resume")
    which.add_argument("--group", metavar="G", help="resume this lock group")
    which.add_argument("--orders", action="store_true",
                       help="end the halt of the order jobs (the default without JOB or --group)")
    which.add_argument("--all", action="store_true", dest="all_jobs",
                       help="end the halt of every job (`halt --all`)")
    s.add_argument("--json", action="store_true",
                   help="print what ended (pause, failure pause, halt) and what still holds the "
                        "job (still_paused, still_halted), as JSON")
