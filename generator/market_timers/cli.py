"""market-timers: the command line. A thin layer: each command calls one library function.

Heavy imports (pandas, exchange_calendars) happen inside the commands that need them, so that
`--help`, the alert handlers and `outbox flush` start fast.
"""

from __future__ import annotations

import argparse
import json
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
stale start, 171 for an overlap skipped and 172 when it cannot run the job.
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="market-timers",
        description="Run a trading system's jobs on its exchange's calendar with systemd timers.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--config", metavar="PATH",
                   help="config file (default: $MARKET_TIMERS_CONFIG, else "
                        "/etc/market-timers/market-timers.toml)")
    p.add_argument("--now", type=_instant, metavar="INSTANT",
                   help="pretend it is this UTC instant (replays and tests), e.g. "
                        "2025-11-24T12:00:00Z")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("plan", help="show the planned fires (job x session -> UTC instant)")
    s.add_argument("--from", dest="from_", type=_date, metavar="DATE")
    s.add_argument("--to", type=_date, metavar="DATE")
    s.add_argument("--json", action="store_true", help="print a JSON array (a periodic job: "
                   "one entry per slot)")
    s.add_argument("--summary", action="store_true", help="one line per job and session: first, "
                   "last, count (a periodic job's slots)")

    s = sub.add_parser("render", help="write the units for the horizon into a directory")
    s.add_argument("--out", required=True, type=Path, metavar="DIR")

    s = sub.add_parser("verify", help="systemd-analyze verify + calendar on rendered units")
    s.add_argument("directory", type=Path, metavar="DIR")

    s = sub.add_parser("sync", help="install the plan's timers into the live unit directory")
    s.add_argument("--dry-run", action="store_true", help="print what it would do")

    s = sub.add_parser("refresh", help="sync, and alert on calendar changes and failures "
                                       "(run daily by market-refresh.timer)")

    s = sub.add_parser("check-cron", help="how a cron line would have fared against the calendar")
    s.add_argument("expr", metavar="CRON", help='five fields, e.g. "45 15 * * 1-5"')
    s.add_argument("--tz", default="UTC", help="time zone cron runs in (default UTC)")
    s.add_argument("--calendar", required=True)
    s.add_argument("--event", default="close", help="open | close | break_start | break_end")
    s.add_argument("--offset", default="0s", help='signed, e.g. "-15min"')
    s.add_argument("--from", dest="from_", type=_date, metavar="DATE")
    s.add_argument("--to", type=_date, metavar="DATE")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("alert", help="send a test alert through a channel")
    s.add_argument("--test", required=True, metavar="CHANNEL")

    s = sub.add_parser("alert-handler", help="OnFailure=/OnSuccess= handler (used by units)")
    s.add_argument("mode", choices=["failure", "success"])
    s.add_argument("unit")

    s = sub.add_parser("outbox", help="the durable alert outbox")
    s.add_argument("action", choices=["list", "flush"])
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("ack", help="acknowledge a critical alert (stops its repeats)")
    s.add_argument("alert_id", metavar="ID")

    s = sub.add_parser("digest", help="send the per-session email digest")
    s.add_argument("--session", type=_date, metavar="DATE")

    sub.add_parser("deadman", help="compare the plan with what ran; alert on misses "
                                   "(run every minute by market-deadman.timer)")

    s = sub.add_parser("status", help="each session's jobs: timer, result, duration, alerts")
    s.add_argument("--session", type=_date, metavar="DATE")
    s.add_argument("--json", action="store_true")
    return p


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
    args = build_parser().parse_args(_glue_signed_values(argv))
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


class UsageError(Exception):
    pass


def _config(args, check_calendars: bool = True):
    from . import config

    return config.load(config.config_path(args.config), check_calendars=check_calendars)


def _now(args) -> datetime:
    from .plan import utcnow

    return args.now or utcnow()


def cmd_plan(args) -> int:
    from . import plan, planview

    cfg = _config(args)
    if args.from_ or args.to:
        start = args.from_ or _now(args).date()
        end = args.to or start
        if end < start:
            raise UsageError(f"--from {start} is after --to {end}")
        fires = _calendar_call(plan.plan_between, cfg, start, end)
    else:
        fires = _calendar_call(plan.plan_ahead, cfg, _now(args))
    if args.json:
        print(json.dumps(planview.json_entries(fires), indent=2))
    elif args.summary:
        print(planview.summary(fires))
    else:
        print(planview.table(fires, cfg))
    return 0


def _calendar_call(fn, *a):
    from .calendars import CalendarError

    try:
        return fn(*a)
    except CalendarError as e:
        raise UsageError(str(e)) from None


def cmd_render(args) -> int:
    from . import plan, render, sync

    cfg = _config(args)
    fires = _calendar_call(plan.plan_ahead, cfg, _now(args) + sync.MIN_LEAD)
    units = render.render_into(cfg, args.out, fires)
    print(f"wrote {len(units)} units for {len(fires)} fires into {args.out}")
    return 0


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
    except (SystemctlError, PermissionError) as e:
        print(f"market-timers sync: {e}", file=sys.stderr)
        return FAILURE
    print("\n".join(result.lines(dry_run=args.dry_run)))
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


def _delegate(module: str, function: str, *extra, check_calendars: bool = False,
              service_user: bool = False):
    def command(args) -> int:
        import importlib

        mod = importlib.import_module(f"market_timers.{module}")
        cfg = _config(args, check_calendars)
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

    cfg = _as_service_user(_config(args, check_calendars=False))
    if args.action == "list":
        return commands.outbox_list(cfg, args.json)
    return commands.outbox_flush(cfg)


def cmd_digest(args) -> int:
    from .alerts import commands

    # Run as the built-in digest job, the runner hands over the session in $MARKET_SESSION.
    session = args.session.isoformat() if args.session else os.environ.get("MARKET_SESSION")
    return commands.digest(_as_service_user(_config(args, check_calendars=False)), session)


COMMANDS = {
    "plan": cmd_plan,
    "render": cmd_render,
    "verify": cmd_verify,
    "sync": cmd_sync,
    "check-cron": cmd_check_cron,
    "alert": _delegate("alerts.commands", "alert_test", "test", service_user=True),
    "alert-handler": _delegate("alerts.commands", "alert_handler", "mode", "unit"),
    "outbox": cmd_outbox,
    "ack": _delegate("alerts.commands", "ack", "alert_id", service_user=True),
    "digest": cmd_digest,
    "refresh": cmd_refresh,
    "deadman": _delegate("deadman", "command", "now", service_user=True),
    "status": _delegate("status", "command", "session", "json", "now"),
}


if __name__ == "__main__":
    sys.exit(main())
