"""market-timers: the command line. A thin layer: each command calls one library function.

Heavy imports (pandas, exchange_calendars) happen inside the commands that need them, so that
`--help`, the alert handlers and `outbox flush` start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, date, datetime
from pathlib import Path

from . import __version__
from .errors import ConfigError
from .exitcodes import FAILURE, USAGE

EPILOG = """\
exit status: 0 ok; 1 failure; 2 bad command line or bad config (nothing was changed).
The job runner (market-timers-run) passes the job's status through; it exits 170 for a
stale start, 171 for an overlap skipped, 172 when it cannot run the job, 173 when
that (job, session) already ran (see `run --force`), 174 when a job's retries are over and
175 when the cluster ledger (PostgreSQL) cannot be reached.
See market-timers(1) and market-timers.toml(5)."""


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date YYYY-MM-DD: {text!r}") from None


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO instant: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the zone, e.g. {text}Z")
    return value.astimezone(UTC)


CONFIG_HELP = ("config file (default: $MARKET_TIMERS_CONFIG, else "
               "/etc/market-timers/market-timers.toml)")
NOW_HELP = "pretend it is this UTC instant (replays and tests), e.g. 2025-11-24T12:00:00Z"
CRON_QUOTE_HINT = ('hint: quote the cron line as one argument, e.g. market-timers check-cron '
                   '"45 15 * * 1-5" --calendar XNYS (unquoted, the shell also replaces each * '
                   "with file names)")


def _global_options(parser: argparse.ArgumentParser, default) -> None:
    """--config and --now: accepted before the command and after it, shown in every --help."""
    parser.add_argument("--config", metavar="PATH", default=default, help=CONFIG_HELP)
    parser.add_argument("--now", type=_instant, metavar="INSTANT", default=default,
                        help=NOW_HELP)


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
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002
        return sub.add_parser(name, help=help, description=help, parents=[common])

    for add in (_add_plan_commands, _add_check_cron, _add_alert_commands, _add_cluster_commands,
                _add_run, _add_event_commands, _add_status):
        add(command)
    return p


# Each adds its subcommands through `command(name, help)`, in the order `--help` lists them.

def _add_plan_commands(command) -> None:
    """plan -> render -> verify -> sync, refresh and try: from the config to the timers."""
    s = command("plan", "show the planned fires (job x session -> UTC instant)")
    s.add_argument("--from", dest="from_", type=_date, metavar="DATE",
                   help="first session to show (default: the coming horizon)")
    s.add_argument("--to", type=_date, metavar="DATE",
                   help="last session to show (default: the --from date)")
    s.add_argument("--json", action="store_true", help="print a JSON array (a periodic job: "
                   "one entry per slot)")
    s.add_argument("--summary", action="store_true", help="one line per job and session: first, "
                   "last, count (a periodic job's slots)")

    s = command("render", "write the units for the horizon into a directory")
    s.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="directory to write the .timer and .service files into")

    s = command("verify", "systemd-analyze verify + calendar on rendered units")
    s.add_argument("directory", type=Path, metavar="DIR",
                   help="a directory written by `market-timers render`")

    s = command("sync", "install the plan's timers into the live unit directory")
    s.add_argument("--dry-run", action="store_true", help="print what it would do")

    command("refresh", "sync, and alert on calendar changes and failures "
                       "(run daily by market-refresh.timer)")

    s = command("try", "run a job once, a few seconds from now, to try it "
                       "(a one-off timer with its own session id try-<time>)")
    s.add_argument("job", metavar="JOB", help="name of a job in the config")
    s.add_argument("--in", dest="delay", type=_seconds, default=5, metavar="SECONDS",
                   help="seconds from now to the fire (default 5, at most 3600)")


def _add_check_cron(command) -> None:
    s = command("check-cron", "how a cron line would have fared against the calendar")
    s.add_argument("expr", metavar="CRON", help='five fields in quotes, e.g. "45 15 * * 1-5"')
    s.add_argument("--tz", default="UTC", help="time zone cron runs in (default UTC)")
    s.add_argument("--calendar", required=True, help="exchange calendar, e.g. XNYS")
    s.add_argument("--event", default="close", help="open | close | break_start | break_end")
    s.add_argument("--offset", default="0s", help='signed, e.g. "-15min"')
    s.add_argument("--from", dest="from_", type=_date, metavar="DATE",
                   help="first day to compare (default: a year ago)")
    s.add_argument("--to", type=_date, metavar="DATE", help="last day to compare")
    s.add_argument("--json", action="store_true", help="print a JSON object")


def _add_alert_commands(command) -> None:
    """alert, alert-handler, outbox, ack, digest and deadman: the alert layer."""
    s = command("alert", "send a test alert through a channel")
    from .alerts.channels import NAMES as CHANNELS

    s.add_argument("--test", required=True, metavar="CHANNEL", help=" | ".join(CHANNELS))

    s = command("alert-handler", "OnFailure=/OnSuccess= handler (used by units)")
    s.add_argument("mode", choices=["failure", "success"], help="which handler this is")
    s.add_argument("unit", help="the job unit that failed or succeeded (%%i)")

    s = command("outbox", "the durable alert outbox")
    s.add_argument("action", choices=["list", "flush"],
                   help="list what is pending, or flush: send it now")
    s.add_argument("--json", action="store_true", help="print JSON (list)")

    s = command("ack", "acknowledge a critical alert (stops its repeats)")
    s.add_argument("alert_id", metavar="ID", help="the alert's id, as shown in the alert")

    s = command("digest", "send the per-session email digest")
    s.add_argument("--session", type=_date, metavar="DATE",
                   help="session date (default: $MARKET_SESSION)")

    command("deadman", "compare the plan with what ran; alert on misses "
                       "(run every minute by market-deadman.timer)")


def _add_cluster_commands(command) -> None:
    """cluster and fence: the PostgreSQL run ledger."""
    s = command("cluster", "the PostgreSQL run ledger shared by a cluster's nodes")
    s.add_argument("action", choices=["init", "status"],
                   help="init: create or migrate the ledger's schema (idempotent); status: "
                        "nodes and which node ran each (job, session)")
    s.add_argument("--dsn-file", metavar="PATH",
                   help="file holding the DSN (default: the credential "
                        "market-timers.cluster-dsn, /etc/credstore/ for an administrator)")
    s.add_argument("--json", action="store_true", help="status as JSON")

    s = command("fence", "inside a job: is its fencing token still current?")
    s.add_argument("action", choices=["check"],
                   help="exit 0 while $MARKET_FENCE holds $MARKET_LOCK_GROUP, 1 once superseded")
    s.add_argument("--dsn-file", metavar="PATH", help="file holding the DSN (as for cluster)")


def _add_run(command) -> None:
    s = command("run", "start a job's run for one session now (refused if that session "
                       "already ran, unless --force)")
    s.add_argument("job", metavar="JOB", help="the job's name")
    s.add_argument("--session", type=_date, required=True, metavar="DATE",
                   help="the session to run it for")
    s.add_argument("--force", action="store_true", help="run it again although it already ran")


def _add_event_commands(command) -> None:
    """event and incidents: the trading system's own events."""
    s = command("event", "hand an event of the trading system to the router "
                         "(any user of the market-timers group)")
    s.add_argument("kind", metavar="KIND", help="e.g. disconnected, rejected ([a-z][a-z0-9_.-]*)")
    s.add_argument("--key", help="what it is about: connection, order id... (groups incidents)")
    s.add_argument("--severity", choices=["critical", "warning", "info"],
                   help="used when [events] sets none for KIND")
    s.add_argument("--text", help="one line for the alert or digest")
    s.add_argument("--job", help="the job sending it (default $MARKET_JOB)")
    s.add_argument("--session", type=_date, metavar="DATE", help="default: from the plan")
    s.add_argument("--value", type=float, help="a number (count rules keep the worst)")

    s = command("incidents", "open incidents; `process` routes spooled events "
                             "(market-events.service)")
    s.add_argument("action", nargs="?", choices=["list", "process"], default="list",
                   help="list (default) the open incidents, or process the spooled events")
    s.add_argument("--json", action="store_true", help="print a JSON array")


def _add_status(command) -> None:
    s = command("status", "each session's jobs: timer, result, duration, alerts")
    s.add_argument("--session", type=_date, metavar="DATE",
                   help="one session (default: the latest started one and the planned ones)")
    s.add_argument("--json", action="store_true", help="print one JSON object")


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if not 1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"from 1 to 3600 seconds: {text!r}")
    return value


def _glue_signed_values(argv: list[str]) -> list[str]:
    """`--offset -15min` -> `--offset=-15min`: argparse would take "-15min" for an option."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--offset" and arg.startswith("-") and arg[1:2].isdigit():
            out[-1] = f"--offset={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, extra = parser.parse_known_args(_glue_signed_values(argv))
    if extra:
        hint = f"\n{CRON_QUOTE_HINT}" if args.command == "check-cron" else ""
        parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    stdout = sys.stdout
    sys.stdout = _PipeGuard(stdout)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print("\n".join(e.problems.lines()), file=sys.stderr)
        print(f"market-timers: {len(e.problems.items)} problem(s) in the config; nothing was "
              "changed", file=sys.stderr)
        return USAGE
    except UsageError as e:
        print(f"market-timers {args.command}: {e}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
        sys.stdout = stdout


class _PipeGuard:
    """stdout that a closed pipe (`plan | head -1`) cannot break: the rest is discarded.

    The command goes on to its end (a sync or a flush is never cut short by its reader going
    away); fd 1 then points at /dev/null so that the interpreter's last flush is quiet too.
    """

    def __init__(self, stream) -> None:
        self._stream = stream
        self._broken = False

    def _guard(self, fn, *a):
        if self._broken:
            return None
        try:
            return fn(*a)
        except BrokenPipeError:
            self._broken = True
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):
                pass
            return None

    def write(self, text: str) -> int:
        self._guard(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class UsageError(Exception):
    pass


def _config(args, check_calendars: bool = True):
    from . import config

    return config.load(config.config_path(args.config), check_calendars=check_calendars)


def _now(args) -> datetime:
    from .plan import utcnow

    return args.now or utcnow()


def cmd_plan(args) -> int:
    from . import calendars, plan, planview
    from .alerts.config import print_route_warnings

    cfg = _config(args)
    print_route_warnings(cfg)
    if args.from_ or args.to:
        start = args.from_ or _now(args).date()
        end = args.to or start
        if end < start:
            raise UsageError(f"--from {start} is after --to {end}")
        _calendar_call(calendars.check_range, start, end)
        if any(j.periodic is not None for j in cfg.jobs):  # fires that hold their slots
            planned = plan.plan_between_partial(cfg, start, end)
            fires, failures = planned.fires, planned.failures
        else:
            fires, failures = plan.plan_between_columns(cfg, start, end)
    else:
        result = plan.plan_ahead_partial(cfg, _now(args))
        fires, failures = result.fires, result.failures
    if args.summary:
        sys.stdout.write(planview.summary(list(fires)) + "\n")
        return _report_failures(args.command, failures)
    # streamed: written as formatted, never the whole text at once
    (planview.write_json if args.json else planview.write_table)(sys.stdout, fires)
    return _report_failures(args.command, failures)


def _report_failures(command: str, failures) -> int:
    """A calendar that could not be planned costs only its own jobs: the rest is printed (or
    installed) as usual, the failure goes to stderr and the exit status is 1."""
    for f in failures:
        print(f"market-timers {command}: {f.line()}", file=sys.stderr)
    return FAILURE if failures else 0


def _calendar_call(fn, *a):
    from .calendars import CalendarError

    try:
        return fn(*a)
    except CalendarError as e:
        raise UsageError(str(e)) from None


def cmd_render(args) -> int:
    from . import plan, render, sync

    cfg = _config(args)
    planned = plan.plan_ahead_partial(cfg, _now(args) + sync.MIN_LEAD)
    fires = planned.fires
    try:
        report = render.render_into(cfg, args.out, fires)
    except OSError as e:
        print(f"market-timers render: cannot write into {args.out}: "
              f"{e.strerror or e}", file=sys.stderr)
        return FAILURE
    for name in report.new:
        print(f"new {name}")
    for name in report.changed:
        print(f"changed {name}")
    print(report.summary(len(fires), args.out))
    return _report_failures(args.command, planned.failures)


def cmd_verify(args) -> int:
    from .verify import verify

    if not args.directory.is_dir():
        raise UsageError(f"not a directory: {args.directory}")
    complaints = verify(args.directory)
    for line in complaints:
        print(line, file=sys.stderr)
    if complaints:
        print(f"market-timers verify: {len(complaints)} complaint(s)", file=sys.stderr)
        return FAILURE
    print(f"{args.directory}: all units verified")
    return 0


def cmd_sync(args) -> int:
    from . import sync
    from .systemctl import SystemctlError

    cfg = _config(args)
    try:
        result = _calendar_call(lambda: sync.sync(cfg, now=args.now, dry_run=args.dry_run))
    except (SystemctlError, sync.SyncError, OSError) as e:  # OSError: also a refused symlink in state_dir
        print(f"market-timers sync: {e}", file=sys.stderr)
        return FAILURE
    lines = result.lines(dry_run=args.dry_run)
    print("\n".join([x for x in lines if not x.startswith("warning: ")] or ["nothing to do"]))
    for line in lines:
        if line.startswith("warning: "):
            print(f"market-timers sync: {line}", file=sys.stderr)
    return _report_failures(args.command, result.failures)


def cmd_try(args) -> int:
    from . import trial
    from .systemctl import Systemctl, SystemctlError

    cfg = _config(args)
    try:
        result = _calendar_call(trial.start_try, cfg, args.job, _now(args), args.delay,
                                Systemctl())
    except trial.UnknownJob as e:
        raise UsageError(str(e)) from None
    except (trial.TryError, SystemctlError) as e:
        print(f"market-timers try: {e}", file=sys.stderr)
        return FAILURE
    print("\n".join(result.lines()))
    return 0


def cmd_check_cron(args) -> int:
    from . import cron_check

    try:
        return cron_check.command(args)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _as_service_user(cfg):
    from .privileges import become_service_user

    become_service_user(cfg)
    return cfg


def _alert_config(args):
    """The alert path's config: a broken file falls back to the last good snapshot."""
    from . import config
    from .alerts import snapshot

    return snapshot.load(config.config_path(args.config))


def _delegate(module: str, function: str, *extra, check_calendars: bool = False,
              service_user: bool = False, alert_path: bool = False):
    def command(args) -> int:
        import importlib

        mod = importlib.import_module(f"market_timers.{module}")
        cfg = _alert_config(args) if alert_path else _config(args, check_calendars)
        if service_user:
            _as_service_user(cfg)
        return getattr(mod, function)(cfg, *extra_args(args))

    def extra_args(args):
        return [getattr(args, name) for name in extra]

    return command


def cmd_refresh(args) -> int:
    from . import config, refresh

    # The refresh loads the config itself: a broken config must alert, not just exit 2.
    return refresh.main_from_path(config.config_path(args.config), args.now)


def cmd_outbox(args) -> int:
    from .alerts import commands

    cfg = _as_service_user(_alert_config(args))
    if args.action == "list":
        return commands.outbox_list(cfg, args.json)
    return commands.outbox_flush(cfg)


def cmd_digest(args) -> int:
    from .alerts import commands

    # Run as the built-in digest job, the runner hands over the session in $MARKET_SESSION.
    session = args.session.isoformat() if args.session else os.environ.get("MARKET_SESSION")
    return commands.digest(_as_service_user(_alert_config(args)), session)


def cmd_cluster(args) -> int:
    from . import cluster

    cfg = _config(args, check_calendars=False)
    if args.action == "init":
        return cluster.init(cfg, args.dsn_file)
    return cluster.status(cfg, args.dsn_file, args.json)


def cmd_fence(args) -> int:
    from . import cluster

    return cluster.fence_check(_config(args, check_calendars=False), args.dsn_file)


def cmd_event(args) -> int:
    from . import config
    from .events import process

    try:  # the spool directory comes from the config; a broken one must not lose the event
        cfg = config.load(config.config_path(args.config), check_calendars=False)
    except (ConfigError, OSError) as e:
        print(f"market-timers event: config not usable ({str(e).splitlines()[0]}); using the "
              "default spool directory", file=sys.stderr)
        cfg = None
    return process.emit_command(args, cfg)


def cmd_incidents(args) -> int:
    from .events import process

    try:
        cfg = _as_service_user(_config(args, check_calendars=False))
    except ConfigError:
        if args.action == "process" and os.environ.get("INVOCATION_ID"):
            import time  # market-events.path would start us again at once: no busy loop

            time.sleep(30)
        raise
    if args.action == "process":
        return process.process(cfg, now=args.now)
    return process.incidents_list(cfg, args.json, now=args.now)


COMMANDS = {
    "plan": cmd_plan,
    "render": cmd_render,
    "verify": cmd_verify,
    "sync": cmd_sync,
    "try": cmd_try,
    "check-cron": cmd_check_cron,
    "alert": _delegate("alerts.commands", "alert_test", "test", service_user=True,
                       alert_path=True),
    "alert-handler": _delegate("alerts.commands", "alert_handler", "mode", "unit",
                               alert_path=True),
    "outbox": cmd_outbox,
    "ack": _delegate("alerts.commands", "ack", "alert_id", service_user=True, alert_path=True),
    "digest": cmd_digest,
    "refresh": cmd_refresh,
    "deadman": _delegate("deadman", "command", "now", service_user=True, alert_path=True),
    "status": _delegate("status", "command", "session", "json", "now"),
    "event": cmd_event,
    "incidents": cmd_incidents,
    "run": _delegate("manual_run", "command", "job", "session", "force", check_calendars=True),
    "cluster": cmd_cluster,
    "fence": cmd_fence,
}


if __name__ == "__main__":
    sys.exit(main())
