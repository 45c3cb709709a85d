"""What every command of the command line runs with: its config, its clock (--now), and the
usage error the entry point turns into exit 2 (cli/entry.py)."""

from __future__ import annotations

from datetime import datetime


class UsageError(Exception):
    """A command given wrong arguments: exit 2 with its text (cli/entry.py)."""


def config_of(args, check_calendars: bool = True):
    from market_timers.config import loader as config

    path = config.config_path(args.config)
    if not check_calendars:
        return config.load(path)
    from market_timers.schedule import (  # imports exchange_calendars: only the commands that plan
        calendar_checks,
    )

    return calendar_checks.load(path)


def now_of(args) -> datetime:
    from market_timers.host.clock import utcnow

    return args.now or utcnow()


def alert_clock(args):
    """The alert layer's clock: --now's instant, or None (the real time)."""
    return (lambda: args.now) if args.now else None


def no_clock(args) -> None:
    """A command that does not read the time: a --now given before it is refused."""
    from market_timers.cli.parser import NO_CLOCK

    if args.command in NO_CLOCK and args.now:
        raise UsageError(f"--now does not apply to {args.command} (it does not depend on the "
                         "time)")


def calendar_call(fn, *a):
    """fn(*a), a calendar's error (a range it cannot plan) a usage error."""
    from market_timers.schedule.calendars import CalendarError

    try:
        return fn(*a)
    except CalendarError as e:
        raise UsageError(str(e)) from None
