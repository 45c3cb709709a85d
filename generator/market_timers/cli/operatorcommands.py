"""The operator commands behind the command line: `run` (one session, or a backfill with
--from), `pause`, `halt`, `halt-watch` and `resume` (their options: operatorargs.py).

Each imports what it needs when it runs, as cli/commands.py's do: the command line starts fast.
"""

from __future__ import annotations

from datetime import UTC, datetime

from market_timers.cli.commandcontext import UsageError, config_of, now_of


def _by_request(args, command: str) -> int | None:
    # controlrequests.by_request, imported when an operator's command runs: not by every command
    from market_timers.cli import controlrequests

    return controlrequests.by_request(args, command)


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
        # the runner's judgement of the start is awaited on the real clock only (not --now's)
        return _manual_run().command(config_of(args), args.job, args.session, args.force,
                                     now=args.now, yes=args.yes,
                                     wait=0 if args.now else _manual_run().WAIT_SEC)
    if args.force or args.yes:
        raise UsageError(f"{'--force' if args.force else '--yes'}: only with --session; a "
                         "backfill runs the sessions that did not run, and none still to come")
    from market_timers.controls import backfill

    return backfill.command(config_of(args), args.job, args.since, args.until,
                            dry_run=args.dry_run, keep_going=args.keep_going,
                            downstream=args.downstream, as_json=args.json, now=args.now)


def cmd_pause(args) -> int:
    if (asked := _by_request(args, "pause")) is not None:  # an operator: root's service runs it
        return asked
    from market_timers.controls import pause

    return pause.pause(config_of(args, check_calendars=False), args.job, args.group, args.until,
                       args.note, now_of(args), as_json=args.json)


def cmd_halt(args) -> int:
    if (asked := _by_request(args, "halt")) is not None:  # an operator: root's service runs it
        return asked
    from market_timers import metrics
    from market_timers.controls import halt
    from market_timers.controls.halt_alerts import halt_alerts

    config = config_of(args, check_calendars=False)
    announce = halt_alerts(config)
    # to the microsecond (the records keep whole seconds): a scope halted, resumed and halted
    # again within one second gets a second on_halt unit and incident (p10, q1: a collision)
    now = args.now or datetime.now(UTC)
    code = halt.halt(config, args.job, args.group, args.all_jobs, args.reason, now,
                     as_json=args.json, announce=announce)
    announce.send()
    metrics.after_control(config)
    return code


def cmd_halt_watch(args) -> int:
    from market_timers.controls import haltwatch

    def load():
        return config_of(args, check_calendars=False)

    return haltwatch.watch(load(), passes=1 if args.once else None, load_config=load)


def cmd_resume(args) -> int:
    if (asked := _by_request(args, "resume")) is not None:  # an operator: root's service runs it
        return asked
    from market_timers import metrics
    from market_timers.controls import resume
    from market_timers.controls.halt_alerts import halt_alerts

    config = config_of(args, check_calendars=False)
    announce = halt_alerts(config, lifted=True)
    code = resume.resume(config, args.job, args.group, now_of(args), as_json=args.json,
                         all_jobs=args.all_jobs, announce=announce)
    announce.send()
    metrics.after_control(config)
    return code
