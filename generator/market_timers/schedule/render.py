"""Plan -> systemd units (jinja2 templates in units/), written atomically and deterministically.

One `.timer` + one `.service` per (job, session): `market-<job>@<session>-<HHMMSS>`. The instant is
part of the name because on systemd 252 editing a waiting timer's OnCalendar can fire it at once
(#16732): a changed instant is a new unit. Jobs at a fixed UTC time get `market-<job>@daily`.
(unitname.py builds and parses the names.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path

import jinja2

from market_timers.config import metrics as metrics_config
from market_timers.config.cluster import DSN_CREDENTIAL
from market_timers.config.loader import Config, Job, default_runner
from market_timers.config.retries import REFUSALS, window
from market_timers.contracts import environment, unitname
from market_timers.contracts.environment import PRE_FIRE_NICE  # the unit's Nice= while it waits
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile
from market_timers.schedule.calendars import resolve
from market_timers.schedule.installed import (  # noqa: F401  (render.read_installed...)
    GENERATED_MARK,
    LAST_SLOT_MARK,
    Installed,
    is_generated,
    last_elapse,
    read_installed,
    timer_instant,
)
from market_timers.schedule.plan import Fire
from market_timers.schedule.unitenv import (
    job_environment,
    job_home,
)
from market_timers.schedule.unitescape import (  # noqa: F401  (render.quote_arg... for callers and tests)
    UnsafeValue,
    comment,
    plain,
    quote_arg,
    quote_env,
    quote_path,
)
from market_timers.schema.durations import format_offset

TEMPLATE_ENV = environment.TEMPLATES


def template_dir() -> Path:
    """units/ in a source tree, else the packaged copy."""
    if os.environ.get(TEMPLATE_ENV):
        return Path(os.environ[TEMPLATE_ENV])
    return _installed_template_dir()


@lru_cache(maxsize=1)
def _installed_template_dir() -> Path:
    """Looked up once per process (job_units asks for every fire)."""
    source_tree = Path(__file__).resolve().parents[3] / "units"
    if (source_tree / "job.timer.j2").exists():
        return source_tree
    return Path("/usr/share/market-timers/units")


def _env() -> jinja2.Environment:
    return _env_for(str(template_dir()))


@lru_cache(maxsize=4)
def _env_for(directory: str) -> jinja2.Environment:
    """One environment per template directory: jinja2 compiles each template once."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - these are unit files, not HTML
    )


@dataclass(frozen=True)
class Unit:
    name: str
    text: str


def job_units(config: Config, job: Job, fire: Fire | None, runner: str, *,
              try_id: str | None = None, handlers: bool = False) -> list[Unit]:
    """The timer and service of one fire (or of a daily job when fire is None).

    try_id: a one-off run (`market-timers try`) with this session id instead of the fire's
    session: no Persistent= stamp (and its success closes no real run's alerts: runends.py).
    handlers: the service's own OnFailure=/OnSuccess= handlers, not an end record (a `market-
    timers run` unit, which PID 1 loads only while it runs).
    """
    env = _env()
    header = (f"{GENERATED_MARK} from {comment(config.source)}.\n"
              "# Do not edit: change the config and run `market-timers sync`.")
    if fire is not None:
        description, stem, context, timer_fields, log_fields = _fire_schedule(job, fire, try_id)
    else:
        description, stem, context, timer_fields, log_fields = _daily_schedule(job)
    if fire is not None and fire.why and not try_id:
        description += f" ({fire.why})"  # why its session rule chose the session
    if job.description:
        description += f" - {job.description}"
    env_lines = job_environment(config, job, context)
    service = env.get_template("job.service.j2").render(
        header=header, description=plain(f"market-timers job {description}"),
        user=environment.PACKAGE_USER, job=job.name,
        environment=[quote_env(k, v) for k, v in env_lines],
        exec_start=" ".join(quote_arg(a) for a in (runner, "--", *job.command)),
        # %n: the record step leaves the unit's end record for market-alert-ends (endrecord.py)
        exec_stop_post=f"{quote_arg(runner)} --record" + ("" if handlers else " %n"),
        handlers=handlers,
        credentials=[*([DSN_CREDENTIAL] if config.cluster else []), *job.credentials],
        watchdog=f"{job.watchdog}s" if job.watchdog else None,
        nice=PRE_FIRE_NICE if job.fire_lead else None,
        realtime_escort=bool(job.fire_lead) and job.periodic is None,  # instant_escort.py
        timeout=f"{job.timeout + job.fire_lead + job.requires_wait}s", log_fields=log_fields,
        retry=retry_settings(job),
        read_write_paths=" ".join(quote_path(p) for p in (
            str(config.state_dir), str(config.runtime_dir), str(config.spool_dir / "events"),
            *job_home(config, job), *job.read_write_paths,
            *metrics_config.write_paths(config))),
    )
    timer = env.get_template("job.timer.j2").render(
        header=header, description=plain(f"market-timers {description}"),
        service=f"{stem}.service",
        persistent="false" if try_id else "true", **timer_fields,
    )
    return [Unit(f"{stem}.timer", timer), Unit(f"{stem}.service", service)]


def _fire_schedule(job: Job, fire: Fire, try_id: str | None):
    """(description, unit stem, MARKET_* context, timer fields, journal fields) of a fire."""
    local = fire.local()
    when = f"{local:%H:%M:%S}" if local.second else f"{local:%H:%M}"
    when += f" {local.tzname()}"
    what = f"{fire.event} {format_offset(fire.offset)}"
    session = try_id or fire.session.isoformat()
    description = f"{job.name} {fire.calendar} {session} {what} at {when}"
    stem = fire.unit_stem
    if try_id:
        description = f"{job.name} {session} (a try, not a session's run) at {when}"
        stem = unitname.trial(job.name, try_id).stem
    context = [(environment.SESSION, session),
               (environment.CALENDAR, fire.calendar), (environment.EVENT, fire.event),
               (environment.SCHEDULED_UTC, fire.fire_iso)]
    timer = {"on_calendar":
             f"{fire.fire_utc - timedelta(seconds=job.fire_lead):%Y-%m-%d %H:%M:%S} UTC"}
    log_fields = [f"MARKET_JOB={job.name}", f"MARKET_SESSION={session}"]
    if fire.is_periodic:
        description, context, timer = _periodic(job, fire, local)
    if job.calendars:  # several exchanges: MARKET_CALENDAR is the one whose event it took
        context.insert(2, (environment.CALENDARS, ",".join(resolve(c) for c in job.calendars)))
    return description, stem, context, timer, log_fields


def _daily_schedule(job: Job):
    """The same for a daily job at a fixed UTC time (`at`)."""
    at = f"{job.at_utc:%H:%M:%S}"
    early = datetime.combine(date(2000, 1, 2), job.at_utc) - timedelta(seconds=job.fire_lead)
    return (f"{job.name} daily at {at} UTC", unitname.daily(job.name).stem,
            [(environment.DAILY_UTC, at)], {"on_calendar": f"*-*-* {early:%H:%M:%S} UTC"},
            [f"MARKET_JOB={job.name}"])


def _periodic(job: Job, fire: Fire, local) -> tuple[str, list, dict]:
    """A periodic job's session: its description, its slot schedule for the runner (slotclock.py)
    and its timer's OnCalendar= lines covering exactly the slots."""
    last = fire.last_utc.astimezone(local.tzinfo)
    description = (f"{job.name} {fire.calendar} {fire.session} every "
                   f"{format_offset(fire.every)[1:]} {local:%H:%M}..{last:%H:%M} {last.tzname()} "
                   f"({len(fire.slots)} slots)")
    context = [(environment.SESSION, fire.session.isoformat()), (environment.CALENDAR, fire.calendar),
               (environment.EVENT, "every"), (environment.SLOT_FIRST_UTC, fire.fire_iso),
               (environment.SLOT_EVERY_SEC, str(fire.every)),
               (environment.SLOT_LAST_UTC, iso(fire.last_utc))]
    if fire.pause:
        context.append((environment.SLOT_PAUSE_UTC, "/".join(iso(t) for t in fire.pause)))
    lines = fire.calendar_lines()
    timer = {"on_calendar": lines[0], "more_on_calendar": lines[1:],
             "last_slot": f"{fire.last_utc:%Y-%m-%d %H:%M:%S} UTC"}
    return description, context, timer


def retry_settings(job: Job) -> dict | None:
    """Restart=/StartLimit*= values for job.service.j2, or None (no retries)."""
    if not job.retries:
        return None
    interval = window(job.grace, job.timeout, job.retries, job.retry_delay, job.retry_delay_max)
    return {"delay": f"{job.retry_delay}s", "burst": job.retries + 2, "prevent": REFUSALS,
            "interval": f"{interval}s"}


def iter_units(config: Config, fires: list[Fire], runner: str | None = None):
    """The units of render_all, one fire's at a time (unsorted): nothing held but the current."""
    runner = runner or config.runner or default_runner()
    jobs = {j.name: j for j in config.jobs}
    for fire in fires:
        if not fire.is_daily:
            yield from job_units(config, jobs[fire.job], fire, runner)
    for job in config.jobs:
        if not job.is_session_job:
            yield from job_units(config, job, None, runner)


def render_all(config: Config, fires: list[Fire], runner: str | None = None) -> list[Unit]:
    return sorted(iter_units(config, fires, runner), key=lambda u: u.name)


def write_atomic(path: Path, text: str, mode: int = 0o644, *, sync: str = atomicfile.DURABLE,
                 compare: bool = True) -> bool:
    """atomicfile.write of a unit file (its parent made if missing). False when the content is
    unchanged (the file is then not touched).

    sync=atomicfile.BATCH (render_into): no fsync here; the caller makes the batch durable with
    sync_directory() before it reports success. compare=False: the caller knows there is no file
    at path yet (nothing to compare with).
    """
    if compare:
        try:
            if path.read_text() == text:
                return False
        except (FileNotFoundError, UnicodeDecodeError):
            pass
    atomicfile.write(path, text, sync=sync, mode=mode, make_dirs=True)
    return True


sync_directory = atomicfile.sync_directory  # the flush of a BATCH


@dataclass
class RenderReport:
    """What `render --out DIR` did: files new, changed, unchanged, and other units left there."""

    units: list[str]  # the names of every unit of the plan
    new: list[str]
    changed: list[str]
    unchanged: list[str]
    stale: list[str]  # market-*@* files in DIR that this plan does not hold (left alone)

    def summary(self, fires: int, out: Path) -> str:
        counts = (f"{len(self.new)} new, {len(self.changed)} changed, "
                  f"{len(self.unchanged)} unchanged")
        if not self.new and not self.changed:
            line = f"nothing changed in {out}: {len(self.units)} units for {fires} fires"
        else:
            line = f"wrote {out}: {counts} ({len(self.units)} units for {fires} fires)"
        if self.stale:
            line += (f"; {len(self.stale)} other market-* unit(s) there are not in this plan "
                     "(left alone)")
        return line


def render_into(config: Config, out: Path, fires: list[Fire]) -> RenderReport:
    """`market-timers render --out DIR`: just the files, no systemd.

    Each unit is rendered and written as it comes (atomic per file: temp file + rename), and the
    whole batch is made durable by one sync_directory() before the report says it is written:
    an fsync per file cost most of a large render's time.
    """
    existed = {p.name for p in out.glob(unitname.GLOB)} if out.is_dir() else set()
    out.mkdir(parents=True, exist_ok=True)
    present = set(os.listdir(out))  # a name not there needs no comparing
    report = RenderReport([], [], [], [], [])
    for u in iter_units(config, fires):
        report.units.append(u.name)
        if write_atomic(out / u.name, u.text, sync=atomicfile.BATCH,
                        compare=u.name in present):
            (report.changed if u.name in existed else report.new).append(u.name)
        else:
            report.unchanged.append(u.name)
    # Always, even when nothing changed: an earlier render whose flush failed may have left
    # the same bytes in the page cache only.
    sync_directory(out)
    for names in (report.units, report.new, report.changed, report.unchanged):
        names.sort()
    report.stale = sorted(existed - set(report.units))
    return report
