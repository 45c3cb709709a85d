"""The commands of config -> plan -> units behind the command line: `plan`, `render`, `verify`,
`sync`.

Each imports what it needs when it runs, as cli/commands.py's do: only the commands that plan
load pandas and exchange_calendars.
"""

from __future__ import annotations

import sys

from market_timers.cli.commandcontext import UsageError, calendar_call, config_of, no_clock, now_of
from market_timers.contracts.exitcodes import FAILURE


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

    cfg = _only_jobs(config_of(args), args.job)
    print_route_warnings(cfg)
    selection.print_warnings(cfg, now_of(args))
    if args.from_ or args.to:
        start = args.from_ or now_of(args).date()
        end = args.to or start
        if end < start:
            raise UsageError(f"--from {start} is after --to {end}")
        calendar_call(calendars.check_range, start, end)
        if any(plan.planned_alone(j) for j in cfg.jobs):  # periodic, several calendars
            planned = plan.plan_between_partial(cfg, start, end)
            fires, failures = planned.fires, planned.failures
        else:
            fires, failures = plan.plan_between_columns(cfg, start, end)
    else:
        result = plan.plan_ahead_partial(cfg, now_of(args))
        fires, failures = result.fires, result.failures
    if args.summary:
        from market_timers.config.dependencies import chain_depths
        from market_timers.schedule.plansummary import summary

        depths = chain_depths({j.name: list(j.requires) for j in cfg.jobs})
        sys.stdout.write(summary(list(fires), now_of(args), depths) + "\n")
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


def cmd_render(args) -> int:
    from market_timers.schedule import plan, render, sync

    cfg = config_of(args)
    planned = plan.plan_ahead_partial(cfg, now_of(args) + sync.MIN_LEAD)
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

    no_clock(args)
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
    from market_timers.cli.progress import for_terminal
    from market_timers.host.clock import utcnow
    from market_timers.host.systemctl import SystemctlError
    from market_timers.schedule import sync

    cfg = config_of(args)
    try:
        now = args.now or utcnow()
        result = calendar_call(lambda: sync.sync(cfg, now=now, dry_run=args.dry_run,
                                                 progress=for_terminal()))
        if not args.dry_run:  # then the alert snapshot and the metrics: not the schedule's own
            from market_timers.cli.synced import after_sync

            after_sync(cfg, now)
    except (SystemctlError, sync.SyncError, OSError) as e:  # OSError: also a refused symlink in state_dir
        print(f"market-timers sync: {e}", file=sys.stderr)
        return FAILURE
    lines = result.report(dry_run=args.dry_run, verbose=args.verbose)
    print("\n".join(x for x in lines if not x.startswith("warning: ")))
    for line in lines:
        if line.startswith("warning: "):
            print(f"market-timers sync: {line}", file=sys.stderr)
    status = _report_failures(args.command, result.failures)
    return FAILURE if result.users_missing else status  # said by jobusers: jobs that cannot run
