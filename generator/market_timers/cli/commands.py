"""The commands behind the command line: each calls one library function.

Each imports what it needs when it runs: heavy imports (pandas, exchange_calendars) happen only
inside the commands that need them, so that `--help`, the alert handlers and `outbox flush` start
fast.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime

from market_timers.contracts import environment
from market_timers.contracts.exitcodes import FAILURE


class UsageError(Exception):
    pass


def _config(args, check_calendars: bool = True):
    from market_timers.config import loader as config

    path = config.config_path(args.config)
    if not check_calendars:
        return config.load(path)
    from market_timers.schedule import (  # imports exchange_calendars: only the commands that plan
        calendar_checks,
    )

    return calendar_checks.load(path)


def _now(args) -> datetime:
    from market_timers.host.clock import utcnow

    return args.now or utcnow()


def _clock(args):
    """The alert layer's clock: --now's instant, or None (the real time)."""
    return (lambda: args.now) if args.now else None


def _no_clock(args) -> None:
    """A command that does not read the time: a --now given before it is refused."""
    from market_timers.cli.parser import NO_CLOCK

    if args.command in NO_CLOCK and args.now:
        raise UsageError(f"--now does not apply to {args.command} (it does not depend on the "
                         "time)")


def _only_jobs(cfg, names: list[str] | None):
    """The config with only these jobs (`plan --job`); an unknown name is a usage error."""
    if not names:
        return cfg
    from dataclasses import replace

    from market_timers.schema.problems import did_you_mean

    known = [j.name for j in cfg.jobs]
    for name in names:
        if name not in known:
            raise UsageError(f"--job {name}: no such job in the config{did_you_mean(name, known)}")
    return replace(cfg, jobs=[j for j in cfg.jobs if j.name in names])


def cmd_plan(args) -> int:
    from market_timers.config.alerts import print_route_warnings
    from market_timers.schedule import calendars, plan, planview, selection

    cfg = _only_jobs(_config(args), args.job)
    print_route_warnings(cfg)
    selection.print_warnings(cfg, _now(args))
    if args.from_ or args.to:
        start = args.from_ or _now(args).date()
        end = args.to or start
        if end < start:
            raise UsageError(f"--from {start} is after --to {end}")
        _calendar_call(calendars.check_range, start, end)
        if any(plan.planned_alone(j) for j in cfg.jobs):  # periodic, several calendars
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
    if args.json:
        planview.write_json(sys.stdout, fires, {j.name: j.requires for j in cfg.jobs})
    else:
        planview.write_table(sys.stdout, fires, slots=args.slots)
        from market_timers.config.dependencies import notes

        for line in notes({j.name: j.requires for j in cfg.jobs}):
            sys.stdout.write(f"note: {line}\n")
    return _report_failures(args.command, failures)


def _report_failures(command: str, failures) -> int:
    """A calendar that could not be planned costs only its own jobs: the rest is printed (or
    installed) as usual, the failure goes to stderr and the exit status is 1."""
    for f in failures:
        print(f"market-timers {command}: {f.line()}", file=sys.stderr)
    return FAILURE if failures else 0


def _calendar_call(fn, *a):
    from market_timers.schedule.calendars import CalendarError

    try:
        return fn(*a)
    except CalendarError as e:
        raise UsageError(str(e)) from None


def cmd_render(args) -> int:
    from market_timers.schedule import plan, render, sync

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
    from market_timers.schedule.verify import ToolMissing, verify

    _no_clock(args)
    if not args.directory.is_dir():
        raise UsageError(f"not a directory: {args.directory}")
    try:
        complaints = verify(args.directory)
    except ToolMissing as e:
        print(f"market-timers verify: {e}", file=sys.stderr)
        return FAILURE
    for line in complaints:
        print(line, file=sys.stderr)
    if complaints:
        print(f"market-timers verify: {len(complaints)} complaint(s)", file=sys.stderr)
        return FAILURE
    print(f"{args.directory}: all units verified")
    return 0


def cmd_sync(args) -> int:
    from market_timers.host.clock import utcnow
    from market_timers.host.systemctl import SystemctlError
    from market_timers.schedule import sync

    cfg = _config(args)
    try:
        now = args.now or utcnow()
        result = _calendar_call(lambda: sync.sync(cfg, now=now, dry_run=args.dry_run))
        if not args.dry_run:  # then the alert snapshot and the metrics: not the schedule's own
            from market_timers.cli.synced import after_sync

            after_sync(cfg, now)
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
    from market_timers.controls import trial
    from market_timers.host.systemctl import Systemctl, SystemctlError

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
    from market_timers.cron import check as cron_check

    config = _config(args, check_calendars=False) if getattr(args, "job", None) else None
    try:
        return cron_check.command(args, config)
    except ValueError as e:
        raise UsageError(str(e)) from None


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
        cfg = _alert_config(args) if alert_path else _config(args, check_calendars)
        if service_user:
            _as_service_user(cfg)
        kwargs = {"now": _clock(args)} if clock else {}
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
    return commands.outbox_flush(cfg, now=_clock(args))


def cmd_digest(args) -> int:
    from market_timers.alerts import commands
    from market_timers.events.report import digest_lines  # the digest composes the two flows

    # Run as the built-in digest job, the runner hands over the session in $MARKET_SESSION.
    session = args.session.isoformat() if args.session else os.environ.get(environment.SESSION)
    return commands.digest(_as_service_user(_alert_config(args)), session, now=_clock(args),
                           incidents=digest_lines)


def cmd_cluster(args) -> int:
    from market_timers.cli import cluster

    _no_clock(args)
    cfg = _config(args, check_calendars=False)
    if args.action == "init":
        return cluster.init(cfg, args.dsn_file, args.node_role)
    return cluster.status(cfg, args.dsn_file, args.json)


def cmd_fence(args) -> int:
    from market_timers.cli import cluster

    _no_clock(args)
    if os.environ.get(environment.FENCE_FD) and args.dsn_file is None:  # no config needed:
        return cluster.fence_check(None, None)  # the job's supervisor answers
    return cluster.fence_check(_config(args, check_calendars=False), args.dsn_file)


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
    cfg = _as_service_user(_config(args, check_calendars=False))
    return process.incidents_list(cfg, args.json, now=args.now)


def _alert_commands():
    from market_timers.alerts import commands

    return commands


def cmd_deadman(args) -> int:
    from market_timers import metrics
    from market_timers.host.clock import utcnow
    from market_timers.watch import deadman

    cfg = _as_service_user(_alert_config(args))
    now = args.now or utcnow()
    status = deadman.command(cfg, now)
    metrics.after_deadman(cfg, now)  # the pass's findings and the ledger, in the textfile
    return status


def _status():
    from market_timers.watch import status

    return status


def _manual_run():
    from market_timers.controls import manual_run

    return manual_run


BACKFILL_ONLY = ("until", "dry_run", "keep_going", "downstream", "json")


def cmd_run(args) -> int:
    if args.session is not None:
        given = [f"--{o.replace('_', '-')}".replace("--until", "--to") for o in BACKFILL_ONLY
                 if getattr(args, o)]
        if given:
            raise UsageError(f"{', '.join(given)}: only with --from (a backfill), not with "
                             "--session")
        return _manual_run().command(_config(args), args.job, args.session, args.force,
                                     now=args.now, yes=args.yes)
    if args.force or args.yes:
        raise UsageError(f"{'--force' if args.force else '--yes'}: only with --session; a "
                         "backfill runs the sessions that did not run, and none still to come")
    from market_timers.controls import backfill

    return backfill.command(_config(args), args.job, args.since, args.until,
                            dry_run=args.dry_run, keep_going=args.keep_going,
                            downstream=args.downstream, as_json=args.json, now=args.now)


def cmd_pause(args) -> int:
    from market_timers.controls import pause

    return pause.pause(_config(args, check_calendars=False), args.job, args.group, args.until,
                       args.note, _now(args), as_json=args.json)


def cmd_halt(args) -> int:
    from market_timers import metrics
    from market_timers.controls import halt
    from market_timers.controls.halt_alerts import halt_alerts

    config = _config(args, check_calendars=False)
    announce = halt_alerts(config)
    code = halt.halt(config, args.job, args.group, args.all_jobs, args.reason, _now(args),
                     as_json=args.json, announce=announce)
    announce.send()
    metrics.after_control(config)
    return code


def cmd_halt_watch(args) -> int:
    from market_timers.controls import haltwatch

    def load():
        return _config(args, check_calendars=False)

    return haltwatch.watch(load(), passes=1 if args.once else None, load_config=load)


def cmd_resume(args) -> int:
    from market_timers import metrics
    from market_timers.controls import resume
    from market_timers.controls.halt_alerts import halt_alerts

    config = _config(args, check_calendars=False)
    announce = halt_alerts(config, lifted=True)
    code = resume.resume(config, args.job, args.group, _now(args), as_json=args.json,
                         all_jobs=args.all_jobs, announce=announce)
    announce.send()
    metrics.after_control(config)
    return code


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
    "digest": cmd_digest,
    "refresh": cmd_refresh,
    "deadman": cmd_deadman,
    "status": _delegate(_status, "command", "session", "json", "now", "html", "since", "until"),
    "event": cmd_event,
    "incidents": cmd_incidents,
    "run": cmd_run,
    "pause": cmd_pause,
    "halt": cmd_halt,
    "halt-watch": cmd_halt_watch,
    "resume": cmd_resume,
    "cluster": cmd_cluster,
    "fence": cmd_fence,
}
