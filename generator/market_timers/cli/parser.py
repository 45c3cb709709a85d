"""The command line's parser: every subcommand, its options and their --help texts.

man/market-timers.1 documents the same (tests/project/test_docs.py checks the two against each other).
build_parser() adds the subcommands group by group, in the order `--help` lists them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from market_timers import __version__
from market_timers.cli.argtypes import session_date, utc_instant, whole_seconds
from market_timers.cli.operatorargs import add_controls, add_run
from market_timers.contracts import environment
from market_timers.contracts.channelnames import NAMES as CHANNELS
from market_timers.contracts.severities import SEVERITIES

EPILOG = """\
exit status: 0 ok; 1 failure; 2 bad command line or bad config (nothing was changed).
The job runner (market-timers-run) passes the job's status through; it exits 170 for a
stale start, 171 for an overlap skipped, 172 when it cannot run the job, 173 when
that (job, session) already ran (see `run --force`), 174 when a job's retries are over,
175 when the cluster ledger (PostgreSQL) cannot be used (unreachable, this node's login
refused, or a failure; an order job never runs outside it), 176 when a job it `requires`
did not succeed in the session, 177 when the job or its lock group is paused,
178 when a halt (`market-timers halt`) covers the job and 179 when the cluster ledger
refused the claim because this node's clock is off ([cluster] max_clock_skew_ms).
See market-timers(1) and market-timers.toml(5)."""


CONFIG_HELP = (f"config file (default: ${environment.CONFIG}, else "
               f"{environment.DEFAULT_CONFIG})")
NOW_HELP = "pretend it is this UTC instant (replays and tests), e.g. 2025-11-24T12:00:00Z"
CRON_QUOTE_HINT = ('hint: quote the cron line as one argument, e.g. market-timers check-cron '
                   '"45 15 * * 1-5" --calendar XNYS (unquoted, the shell also replaces each * '
                   "with file names)")


def _global_options(parser: argparse.ArgumentParser, default, clock: bool = True) -> None:
    """--config and --now: accepted before the command and after it, shown in every --help
    (--now only in the commands that read the clock: NO_CLOCK's refuse it)."""
    parser.add_argument("--config", metavar="PATH", default=default, help=CONFIG_HELP)
    if clock:
        parser.add_argument("--now", type=utc_instant, metavar="INSTANT", default=default,
                            help=NOW_HELP)


# Commands whose work does not depend on the time: no --now (given before them, refused).
NO_CLOCK = ("verify", "cluster", "fence")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="market-timers",
        description="Run a trading system's jobs on its exchange's calendar with systemd timers.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _global_options(p, None)
    # After the command, a value given there wins; absent, the one before the command stays
    # (SUPPRESS: the subcommand's namespace then has no such attribute to copy over it).
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, argparse.SUPPRESS)
    config_only = argparse.ArgumentParser(add_help=False)
    _global_options(config_only, argparse.SUPPRESS, clock=False)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002
        parents = [config_only if name in NO_CLOCK else common]
        return sub.add_parser(name, help=help, description=help, parents=parents)

    for add in (_add_plan_commands, _add_check_cron, _add_alert_commands, _add_cluster_commands,
                add_run, add_controls, _add_event_commands, _add_status):
        add(command)
    return p


# Each adds its subcommands through `command(name, help)`, in the order `--help` lists them.

def _add_plan_commands(command) -> None:
    """plan -> render -> verify -> sync, refresh and try: from the config to the timers."""
    s = command("plan", "show the planned fires (job x session -> UTC instant)")
    s.add_argument("--from", dest="from_", type=session_date, metavar="DATE",
                   help="first session to show (default: the coming horizon)")
    s.add_argument("--to", type=session_date, metavar="DATE",
                   help="last session to show (default: the --from date)")
    s.add_argument("--json", action="store_true", help="print a JSON array (a periodic job: "
                   "one entry per slot)")
    s.add_argument("--summary", action="store_true", help="one line per job, in the day's "
                   "order: its rule, its instants in exchange time, its next fire, its count")
    s.add_argument("--slots", action="store_true", help="a periodic job: one line per slot "
                   "(default: one per session, its first and last slot and their count)")
    s.add_argument("--job", action="append", metavar="NAME",
                   help="only this job (repeatable)")

    s = command("render", "write the units for the horizon into a directory")
    s.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="directory to write the .timer and .service files into")

    s = command("verify", "systemd-analyze verify + calendar on rendered units")
    s.add_argument("directory", type=Path, metavar="DIR",
                   help="a directory written by `market-timers render`")

    s = command("sync", "install the plan's timers into the live unit directory")
    s.add_argument("--dry-run", action="store_true", help="print what it would do")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="each unit written, started, stopped or deleted, before the summary")

    command("refresh", "sync, and alert on calendar changes and failures "
                       "(run daily by market-refresh.timer)")

    s = command("try", "run a job once, a few seconds from now, to try it "
                       "(a one-off timer with its own session id try-<time>)")
    s.add_argument("job", metavar="JOB", help="name of a job in the config")
    s.add_argument("--in", dest="delay", type=whole_seconds, default=None, metavar="SECONDS",
                   help="seconds from now to the fire (default 5, or the job's lead + 3 when "
                        "more; less is refused: the timer would be elapsed; at most 3600)")
    s.add_argument("--wait", action="store_true",
                   help="wait for the run to end (at most its timeout + 30 s) and say its "
                        "outcome; exit 0 when it succeeded, 1 otherwise")


def _add_check_cron(command) -> None:
    s = command("check-cron", "how a cron line would have fared against the calendar")
    s.add_argument("expr", metavar="CRON", help='five fields in quotes, e.g. "45 15 * * 1-5"')
    s.add_argument("--tz", help="time zone cron runs in, e.g. UTC or Europe/London (default: "
                   "the exchange's zone; a crontab runs in the host's, see timedatectl)")
    s.add_argument("--calendar", help="exchange calendar, e.g. XNYS (default: the config's "
                   "calendar; or --job)")
    s.add_argument("--job", metavar="NAME", help="compare with this configured job instead: its "
                   "calendar, event, offset and session rule (e.g. a month end)")
    s.add_argument("--event", default="close", help="open | close | break_start | break_end")
    s.add_argument("--offset", default="0s", help='signed, e.g. "-15min"')
    s.add_argument("--from", dest="from_", type=session_date, metavar="DATE",
                   help="first day to compare (default: 90 days before --to)")
    s.add_argument("--to", type=session_date, metavar="DATE", help="last day to compare (default: today)")
    s.add_argument("--json", action="store_true", help="print a JSON object")


def _add_alert_commands(command) -> None:
    """alert, alert-handler, outbox, ack, alerts, digest and deadman: the alert layer."""
    s = command("alert", "send a test alert through a channel")
    s.add_argument("--test", required=True, metavar="CHANNEL", help=" | ".join(CHANNELS))

    s = command("alert-handler", "OnFailure=/OnSuccess= handler, and the job units' end "
                                 "records' (used by units)")
    s.add_argument("mode", choices=["failure", "success", "ends"],
                   help="which handler this is (ends: every end record in <state_dir>/ends)")
    s.add_argument("unit", nargs="?", default="",
                   help="the unit that failed or succeeded (%%i); none for ends")

    s = command("outbox", "the durable alert outbox")
    s.add_argument("action", choices=["list", "flush"],
                   help="list what is pending, or flush: send it now")
    s.add_argument("--json", action="store_true", help="print JSON (list)")

    s = command("ack", "acknowledge an alert's incident (a critical's repeats stop on every "
                       "channel)")
    s.add_argument("alert_id", metavar="ID", help="the alert's id, as shown in the alert")

    s = command("alerts", "list the open incidents: id, severity, job and session, age, and "
                          "the command that acknowledges each")
    s.add_argument("--json", action="store_true", help="print a JSON array")

    s = command("digest", "send the per-session email digest")
    s.add_argument("--session", type=session_date, metavar="DATE",
                   help="session date (default: $MARKET_SESSION)")

    command("deadman", "compare the plan with what ran; alert on misses "
                       "(run every minute by market-deadman.timer)")


def _add_cluster_commands(command) -> None:
    """cluster and fence: the PostgreSQL run ledger."""
    s = command("cluster", "the PostgreSQL run ledger shared by a cluster's nodes")
    s.add_argument("action", choices=["init", "status", "check"],
                   help="init: create or migrate the ledger's schema (idempotent); status: "
                        "nodes and which node ran each (job, session); check: what makes the "
                        "ledger unsafe (exit 1)")
    s.add_argument("--dsn-file", metavar="PATH",
                   help="file holding the DSN (default: the credential "
                        "market-timers.cluster-dsn, /etc/credstore/ for an administrator)")
    s.add_argument("--node-role", metavar="ROLE", action="append", default=[],
                   help="init: a node's PostgreSQL role (repeat, one role per node): granted "
                        "EXECUTE on the ledger's functions only, no table right")
    s.add_argument("--operator-role", metavar="ROLE", action="append", default=[],
                   help="init: the operator's PostgreSQL role, the only one that may lift a "
                        "halt or a pause (its DSN: root's credential "
                        "market-timers.cluster-operator-dsn)")
    s.add_argument("--json", action="store_true", help="status as JSON")

    s = command("fence", "inside a job: is its fencing token still current?")
    s.add_argument("action", choices=["check"],
                   help="exit 0 while $MARKET_FENCE holds $MARKET_LOCK_GROUP, 1 once superseded")
    s.add_argument("--dsn-file", metavar="PATH", help="file holding the DSN (as for cluster)")


def _add_event_commands(command) -> None:
    """event and incidents: the trading system's own events."""
    s = command("event", "hand an event of the trading system to the router "
                         "(any user of the market-timers group)")
    s.add_argument("kind", metavar="KIND", help="e.g. disconnected, rejected ([a-z][a-z0-9_.-]*)")
    s.add_argument("--key", help="what it is about: connection, order id... (groups incidents)")
    s.add_argument("--severity", choices=list(SEVERITIES),
                   help="used when [events] sets none for KIND")
    s.add_argument("--text", help="one line for the alert or digest")
    s.add_argument("--job", help="the job sending it (default $MARKET_JOB)")
    s.add_argument("--session", type=session_date, metavar="DATE", help="default: from the plan")
    s.add_argument("--value", type=float, help="a number (count rules keep the worst)")

    s = command("incidents", "open incidents; `process` routes spooled events "
                             "(market-events.service)")
    s.add_argument("action", nargs="?", choices=["list", "process"], default="list",
                   help="list (default) the open incidents, or process the spooled events")
    s.add_argument("--json", action="store_true", help="print a JSON array")


def _add_status(command) -> None:
    s = command("status", "each session's jobs: timer, result, duration, alerts")
    s.add_argument("--session", type=session_date, metavar="DATE",
                   help="one session (default: today's session and the next one; with --json, "
                        "the latest started one and the planned ones)")
    s.add_argument("--week", action="store_true",
                   help="the sessions of the seven days from today's")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--html", metavar="FILE", help="write the sessions x jobs page (one "
                   "self-contained HTML file; default window: a week back and every planned "
                   "session)")
    s.add_argument("--from", dest="since", type=session_date, metavar="DATE",
                   help="the first session shown")
    s.add_argument("--to", dest="until", type=session_date, metavar="DATE",
                   help="the last session shown")
