"""`market-timers check-cron`: how a cron line would have fared against an exchange calendar.

For people migrating from cron. Given a cron line in some time zone and the job it was meant to be
("15 minutes before the XNYS close"), every fire of the cron line between --from 00:00 UTC and
--to 23:59 UTC (inclusive) is put in exactly one bucket, as the README's cron table counts them:

* on_time:    the fire equals some session's (event + offset) instant exactly;
* no_session: the fire's exchange-local date has no session (holiday or weekend);
* other_time: the exchange-local date has a session, but the fire is not at its event + offset
              (an early close, a DST week where the cron's zone and the exchange's disagree...);
* not_chosen: (with --job, a job whose session rule chooses some sessions: a month end, a third
              Friday) the date has a session the rule does not choose.
With --job the calendar, event, offset and rule are the configured job's, and its instants are
the plan's (schedule/plan.py), so "on time" means what the job itself would have done.

The cron line is read as Debian's cron reads it (cronline.py); the report, text or JSON, is
report.py's.

DST, as Debian's cron does it (and cronsim, checked here): a wall-clock time that does not exist
(spring) fires once, at the end of the gap (Madrid "30 2 * * *" on 2025-03-30 fires at 03:00 CEST =
01:00 UTC); one that occurs twice (autumn) fires once, at its first occurrence. A line at a trading
hour is not affected.

pandas, exchange_calendars (through calendars.py, which also applies `plan`'s range rule) and cronsim
are imported inside the functions: this module is imported by the CLI, and only this command needs
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from market_timers.config.jobs import EVENTS
from market_timers.cron.cronline import cron_line
from market_timers.cron.report import format_text, hm_local, to_json
from market_timers.schema.problems import did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    import argparse

DEFAULT_DAYS = 90

_EVENT_WORDS = {
    "open": "opens",
    "close": "closes",
    "break_start": "break starts",
    "break_end": "break ends",
}


@dataclass(frozen=True)
class WrongFire:
    """One fire of the cron line that was not at the session's event + offset."""

    fire_utc: datetime
    fire_local: datetime  # in the exchange's zone
    kind: str  # "no_session" | "other_time" | "not_chosen"
    event: str = ""  # open | close | break_start | break_end
    session: date | None = None  # the session on the fire's exchange-local date (other_time)
    event_local: datetime | None = None  # that session's event, exchange-local (None: no break)
    expected_utc: datetime | None = None  # event + offset, UTC (None: the session has no break)

    why: str = ""  # not_chosen: the rule that chooses other sessions

    def calendar_says(self) -> str:
        if self.kind == "no_session":
            return "no session (holiday/weekend)"
        if self.kind == "not_chosen":
            return f"a session the job's rule does not choose ({self.why})"
        if self.event_local is None or self.expected_utc is None:
            return "session has no break; no fire is due"
        return "session {} {}; fire should be {} ({})".format(
            _EVENT_WORDS.get(self.event, self.event), hm_local(self.event_local),
            hm_local(self.expected_utc.astimezone(self.fire_local.tzinfo)),
            self.expected_utc.strftime("%H:%M UTC"),
        )


@dataclass
class CronCheckResult:
    expr: str
    tz: str
    calendar: str  # canonical name, e.g. "XNYS" for "NYSE"
    event: str
    offset_seconds: int
    start: date
    end: date
    fires: int = 0
    on_time: int = 0
    no_session: int = 0
    other_time: int = 0
    not_chosen: int = 0
    job: str = ""  # --job: the configured job compared against
    wrong: list[WrongFire] = field(default_factory=list)
    defaults: list[str] = field(default_factory=list)  # the defaults taken, said with the result


# ---------------------------------------------------------------------------------------------
# the zone and the calendar


def _zone(tz: str):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        hint = did_you_mean(tz, sorted(available_timezones()))
        raise ValueError(f"--tz {tz!r}: unknown time zone (an IANA name such as "
                         f"America/New_York or UTC){hint}") from None


def _calendar(name: str, start: date, end: date):
    """The calendar for start..end (a week's margin either side: a fire near the window's edge
    may belong to a session just outside it), built by calendars.py under the same range rule
    and data limits as `plan`."""
    from market_timers.schedule import calendars

    try:
        calendars.resolve(name)
    except calendars.CalendarError as e:
        raise ValueError(f"--calendar {name!r}: {e}") from None
    try:
        calendars.check_range(start, end)
        cal = calendars.calendar_for(name, start - timedelta(days=7), end + timedelta(days=7))
    except calendars.CalendarError as e:
        raise ValueError(f"--calendar {name!r}: cannot cover {start}..{end}: {e}") from None
    first, last = calendars.data_limits(name)
    if (first is not None and start < first) or (last is not None and end > last):
        raise ValueError(f"--calendar {name!r}: cannot cover {start}..{end}: exchange_calendars "
                         f"{calendars.version()} has {cal.name}'s holidays from "
                         f"{first or 'any date'} to {last or 'any date'} only")
    return cal


# ---------------------------------------------------------------------------------------------
# the check


def _session_events(cal, event: str) -> dict[date, datetime | None]:
    """Session date -> its event's instant (UTC) or None (no break that day)."""
    import pandas as pd

    return {label.date(): None if pd.isna(t) else t.to_pydatetime()
            for label, t in cal.schedule[event].items()}


def _fires(line: str, zone, start: date, end: date):
    """Every fire of the cron line `line` in `zone` from `start` 00:00 UTC to `end` 23:59:59 UTC,
    in UTC."""
    from cronsim import CronSim

    lo = datetime(start.year, start.month, start.day, tzinfo=UTC)
    hi = datetime(end.year, end.month, end.day, 23, 59, 59, tzinfo=UTC)
    # cronsim yields instants strictly after its start: begin one second early so that a fire at exactly
    # --from 00:00 UTC counts. The start is tz-aware in the cron's zone so cronsim walks wall time.
    it = CronSim(line, (lo - timedelta(seconds=1)).astimezone(zone))
    while True:
        fire_utc = next(it).astimezone(UTC)
        if fire_utc > hi:
            return
        yield fire_utc


def check_cron(expr: str, tz: str | None, calendar: str, event: str, offset_seconds: int,
               start: date, end: date, chosen: dict[date, datetime] | None = None,
               rule: str = "") -> CronCheckResult:
    """Classify every fire of `expr` (in zone `tz`, None: the exchange's) from `start` 00:00 UTC
    to `end` 23:59 UTC.
    `chosen`: the sessions a job's rule chooses and their instants (the plan's), `rule` its
    words; then a fire on another session is not_chosen."""
    if event not in EVENTS:
        raise ValueError(f"--event {event!r}: must be one of {', '.join(EVENTS)}")
    if start > end:
        raise ValueError(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    line = cron_line(expr)
    cal = _calendar(calendar, start, end)
    tz = tz or str(cal.tz)
    zone = _zone(tz)
    if event.startswith("break") and not cal.has_break:
        raise ValueError(f"--event {event!r}: calendar {cal.name} has no breaks "
                         "(use open or close)")

    xtz = cal.tz
    offset = timedelta(seconds=offset_seconds)
    events = _session_events(cal, event)
    targets = {t + offset for t in events.values() if t is not None}
    if chosen is not None:
        targets = set(chosen.values())

    res = CronCheckResult(expr=expr, tz=tz, calendar=cal.name, event=event,
                          offset_seconds=offset_seconds, start=start, end=end)
    for fire_utc in _fires(line, zone, start, end):
        res.fires += 1
        if fire_utc in targets:
            res.on_time += 1
            continue
        local = fire_utc.astimezone(xtz)
        if local.date() not in events:
            res.no_session += 1
            res.wrong.append(WrongFire(fire_utc, local, "no_session", event))
            continue
        if chosen is not None and local.date() not in chosen:
            res.not_chosen += 1
            res.wrong.append(WrongFire(fire_utc, local, "not_chosen", event, session=local.date(),
                                       why=rule))
            continue
        ev = events[local.date()]
        res.other_time += 1
        res.wrong.append(WrongFire(
            fire_utc, local, "other_time", event, session=local.date(),
            event_local=None if ev is None else ev.astimezone(xtz),
            expected_utc=(chosen[local.date()] if chosen is not None
                          else None if ev is None else (ev + offset).astimezone(UTC)),
        ))
    return res


def command(args: argparse.Namespace, config=None) -> int:
    """CLI entry: `market-timers check-cron EXPR --tz --calendar --event --offset [--from --to]`.

    Raises ValueError on bad input (the CLI turns it into exit 2).
    """
    import json

    from market_timers.schema.durations import parse_offset

    try:
        offset_seconds = parse_offset(args.offset)
    except ValueError as e:
        raise ValueError(f"--offset {args.offset!r}: {e}") from None
    now = getattr(args, "now", None) or datetime.now(UTC)
    end = args.to if args.to is not None else now.date()
    start = args.from_ if args.from_ is not None else end - timedelta(days=DEFAULT_DAYS)
    calendar = args.calendar or getattr(config, "calendar", None)
    if getattr(args, "job", None):
        result = _check_job(args, config, start, end)
    elif calendar is None:
        raise ValueError("--calendar or --job is required (the config names no calendar)")
    else:
        result = check_cron(args.expr, args.tz, calendar, args.event, offset_seconds,
                            start, end)
    result.defaults = _defaults_taken(args, calendar, config, result)
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        print(format_text(result), end="")
    return 0


def _defaults_taken(args, calendar, config, result: CronCheckResult) -> list[str]:
    """What the operator did not say, told with the answer: a crontab runs in the host's zone."""
    said = []
    if args.from_ is None:
        said.append(f"the last {DEFAULT_DAYS} days (--from/--to for another window)")
    if not args.tz:
        said.append(f"cron in the exchange's zone {result.tz} (a crontab runs in the host's "
                    "zone: give it with --tz)")
    if not args.calendar and not getattr(args, "job", None) and config is not None:
        said.append(f"the calendar {calendar} of {config.source} (--calendar for another)")
    return said


def _check_job(args, cfg, start: date, end: date) -> CronCheckResult:
    """check-cron --job NAME: the configured job's calendar, event, offset and session rule (`cfg`,
    loaded by the command line), and the plan's instants for it."""
    from dataclasses import replace

    from market_timers.schedule import plan

    if args.calendar is not None or args.event != "close" or args.offset != "0s":
        raise ValueError("--job takes the job's own calendar, event and offset: leave out "
                         "--calendar, --event and --offset")
    names = [j.name for j in cfg.jobs]
    job = next((j for j in cfg.jobs if j.name == args.job), None)
    if job is None:
        raise ValueError(f"--job {args.job}: no such job in {cfg.source}"
                         f"{did_you_mean(args.job, names)}")
    if not job.is_session_job or job.periodic is not None or job.calendars:
        raise ValueError(f"--job {args.job}: check-cron compares a cron line with a job that "
                         "runs once per session on one calendar")
    fires = plan.plan_between(replace(cfg, jobs=[job]), start - timedelta(days=7),
                              end + timedelta(days=7))
    chosen = {f.session: f.fire_utc for f in fires}
    rule = next((f.why for f in fires if f.why), "")
    result = check_cron(args.expr, args.tz, job.calendar, job.event, job.offset, start, end,
                        chosen=chosen if job.selects or job.skip else None,
                        rule=rule or "the job's skip list")
    result.job = job.name
    return result
