"""The commands behind the command line: each calls one library function.

Each imports what it needs when it runs: heavy imports (pandas, exchange_calendars) happen only
inside the commands that need them, so that `--help`, the alert handlers and `outbox flush` start
fast. The commands of config -> plan -> units are plancommands.py's, the operator's
operatorcommands.py's; COMMANDS, at the end, names them all.
"""

from __future__ import annotations

import os
import sys

from market_timers.cli.commandcontext import (
    UsageError,
    alert_clock,
    calendar_call,
    config_of,
    no_clock,
    now_of,
)
from market_timers.cli.operatorcommands import (
    cmd_halt,
    cmd_halt_watch,
    cmd_pause,
    cmd_resume,
    cmd_run,
)
from market_timers.cli.plancommands import cmd_plan, cmd_render, cmd_sync, cmd_verify
from market_timers.contracts import environment
from market_timers.contracts.exitcodes import FAILURE

TRY_WAIT_MAX_DELAY = 60  # `try --in` beyond this: its judgement is not waited for
VERDICT_WAIT_SEC = 20  # after the fire: the runner judges a start within a second or two


def cmd_try(args) -> int:
    from market_timers.controls import trial
    from market_timers.host.systemctl import Systemctl, SystemctlError

    cfg = config_of(args)
    now = now_of(args)
    try:
        result = calendar_call(trial.start_try, cfg, args.job, now, args.delay, Systemctl())
    except (trial.UnknownJob, trial.TooSoon) as e:
        raise UsageError(str(e)) from None
    except (trial.TryError, SystemctlError) as e:
        print(f"market-timers try: {e}", file=sys.stderr)
        return FAILURE
    print("\n".join(result.lines()), flush=True)
    if args.now is not None:  # not the clock's fire
        return 0
    if not args.wait and args.delay is not None and args.delay > TRY_WAIT_MAX_DELAY:
        return 0
    return trial.await_try(cfg, result, Systemctl(), now, VERDICT_WAIT_SEC, to_the_end=args.wait)


def cmd_check_cron(args) -> int:
    from market_timers.cron import check as cron_check

    config = None
    if getattr(args, "job", None) or args.calendar is None:
        config = _cron_config(args)
    try:
        return cron_check.command(args, config)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cron_config(args):
    """check-cron's config: its calendar is the default; without a config file, --calendar or
    --job must say which (any other problem of the file is the config's error, exit 2)."""
    import os

    from market_timers.config import loader as config

    if args.calendar is None and not getattr(args, "job", None) \
            and not os.path.exists(config.config_path(args.config)):
        raise UsageError("--calendar or --job is required (no config "
                         f"{config.config_path(args.config)} to take its calendar from)")
    return config_of(args, check_calendars=False)


def _as_service_user(cfg):
    from market_timers.alerts.privileges import become_service_user

    become_service_user(cfg)
    return cfg


def _alert_config(args):
    """The alert path's config: a broken file falls back to the last good snapshot."""
    from market_timers.alerts import snapshot
    from market_timers.config import loader as config

    return snapshot.load(config.config_path(args.config))


def _delegate(module, function: str, *extra, check_calendars: bool = False,
              service_user: bool = False, alert_path: bool = False, clock: bool = False):
    """module: a function that imports the command's module (each import stays visible to the
    import contract, and is made only when the command runs). clock: the function takes the
    alert layer's clock (--now) as `now`."""
    def command(args) -> int:
        mod = module()
        cfg = _alert_config(args) if alert_path else config_of(args, check_calendars)
        if service_user:
            _as_service_user(cfg)
        kwargs = {"now": alert_clock(args)} if clock else {}
        return getattr(mod, function)(cfg, *extra_args(args), **kwargs)

    def extra_args(args):
        return [getattr(args, name) for name in extra]

    return command


def cmd_refresh(args) -> int:
    from market_timers.cli import refresh
    from market_timers.config import loader as config

    # The refresh loads the config itself: a broken config must alert, not just exit 2.
    return refresh.main_from_path(config.config_path(args.config), args.now)


def cmd_outbox(args) -> int:
    from market_timers.alerts import commands

    cfg = _as_service_user(_alert_config(args))
    if args.action == "list":
        return commands.outbox_list(cfg, args.json)
    return commands.outbox_flush(cfg, now=alert_clock(args))


def cmd_digest(args) -> int:
    from market_timers.alerts import commands
    from market_timers.events.report import digest_lines  # the digest composes the two flows

    # Run as the built-in digest job, the runner hands over the session in $MARKET_SESSION.
    session = args.session.isoformat() if args.session else os.environ.get(environment.SESSION)
    return commands.digest(_as_service_user(_alert_config(args)), session, now=alert_clock(args),
                           incidents=digest_lines)


def cmd_cluster(args) -> int:
    from market_timers.cli import cluster

    no_clock(args)
    cfg = config_of(args, check_calendars=False)
    if args.action == "init":
        return cluster.init(cfg, args.dsn_file, args.node_role, args.operator_role)
    if args.action == "check":
        return cluster.check(cfg, args.dsn_file)
    return cluster.status(cfg, args.dsn_file, args.json)


def cmd_fence(args) -> int:
    from market_timers.cli import cluster

    no_clock(args)
    if os.environ.get(environment.FENCE_FD) and args.dsn_file is None:  # no config needed:
        return cluster.fence_check(None, None)  # the job's supervisor answers
    return cluster.fence_check(config_of(args, check_calendars=False), args.dsn_file)


def cmd_event(args) -> int:
    from market_timers.config.path import config_path
    from market_timers.events import emit  # the spool dirs only: the config is not loaded

    return emit.emit_command(args, emit.configured_dirs(config_path(args.config)))


def cmd_incidents(args) -> int:
    from market_timers.events import process

    if args.action == "process":  # the alert path: a broken file must not stop the routing
        from market_timers.alerts.snapshot import announce

        cfg = _as_service_user(_alert_config(args))
        if getattr(cfg, "broken", None) is not None:
            announce(cfg)
        return process.process(cfg, now=args.now)
    cfg = _as_service_user(config_of(args, check_calendars=False))
    return process.incidents_list(cfg, args.json, now=args.now)


def _alert_commands():
    from market_timers.alerts import commands

    return commands


def cmd_deadman(args) -> int:
    from market_timers.config.metrics import metrics_of
    from market_timers.host.clock import utcnow
    from market_timers.watch import deadman

    cfg = _as_service_user(_alert_config(args))
    now = args.now or utcnow()
    status = deadman.command(cfg, now)
    textfile = metrics_of(cfg)
    # without node_exporter's directory there is nothing to write: the metrics are not loaded
    if textfile.enabled and os.path.isdir(textfile.directory):
        from market_timers import metrics

        metrics.after_deadman(cfg, now)  # the pass's findings and the ledger, in the textfile
    return status


def cmd_take_requests(args) -> int:
    from market_timers.cli import controlrequests

    return controlrequests.cmd_take_requests(args)


def _status():
    from market_timers.watch import status

    return status


COMMANDS = {
    "plan": cmd_plan,
    "render": cmd_render,
    "verify": cmd_verify,
    "sync": cmd_sync,
    "try": cmd_try,
    "check-cron": cmd_check_cron,
    "alert": _delegate(_alert_commands, "alert_test", "test", service_user=True,
                       alert_path=True, clock=True),
    "alert-handler": _delegate(_alert_commands, "alert_handler", "mode", "unit",
                               alert_path=True, clock=True),
    "outbox": cmd_outbox,
    "ack": _delegate(_alert_commands, "ack", "alert_id", service_user=True, alert_path=True,
                     clock=True),
    "alerts": _delegate(_alert_commands, "alerts_list", "json", service_user=True,
                        alert_path=True, clock=True),
    "digest": cmd_digest,
    "refresh": cmd_refresh,
    "deadman": cmd_deadman,
    "status": _delegate(_status, "command", "session", "json", "now", "html", "since", "until",
                        "week"),
    "event": cmd_event,
    "incidents": cmd_incidents,
    "run": cmd_run,
    "pause": cmd_pause,
    "halt": cmd_halt,
    "halt-watch": cmd_halt_watch,
    "resume": cmd_resume,
    "take-requests": cmd_take_requests,
    "cluster": cmd_cluster,
    "fence": cmd_fence,
}
