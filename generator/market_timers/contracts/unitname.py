"""The names of market-timers' job units: built and parsed here and nowhere else.

    market-<job>@<session>-<HHMMSS>            a session's fire (HHMMSS: its UTC instant)
    market-<job>@<session>-<HHMMSS>-<tag>      a periodic job's session (first slot; tag: a digest
                                               of its slot list, periodic.schedule_tag)
    market-<job>@daily                         a job at a fixed UTC time (one unit for every day)
    market-<job>@try-<YYYYMMDDTHHMMSSZ>        `market-timers try` (runtime units)
    market-<job>@<session>-run<HHMMSS>         `market-timers run` (a one-off .service)

each with `.timer` and `.service` (a manual run has a service only). The instant is part of the
name because systemd 252 may fire a timer whose OnCalendar= is edited in place (#16732): a changed
instant is a new unit. Job names are `[a-z][a-z0-9_-]*` (job_config.py), so the first '@' ends them.

Stdlib only, and nothing else imported: the OnFailure= handler (alerts/handler.py) parses names on
its way to an alert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime

PREFIX = "market-"
# The package's own services (units/, not templates): each has OnFailure=market-alert-failure@%n,
# whose handler delivers at once, without them; the dead-man's heartbeat reports /fail while one
# is failed (watch/deadman.py). tests/watch/test_units.py holds units/ to this list.
PACKAGE_SERVICES = ("market-outbox.service", "market-events.service", "market-refresh.service",
                    "market-deadman.service", "market-halt-watch.service",
                    "market-controls.service", "market-alert-ends.service")
GLOB = "market-*@*"  # every job unit (and the templates market-alert-*@.service: check is_ours)
FIRE, PERIODIC, DAILY, TRY, RUN = "fire", "periodic", "daily", "try", "run"

_NAME = re.compile(r"market-(?P<job>[^@]+)@(?P<instance>[^@]+?)(?P<suffix>\.timer|\.service)?")
_INSTANCE = re.compile(
    r"(?P<daily>daily)"
    r"|(?P<try>try-\d{8}T\d{6}Z)"
    r"|(?P<session>\d{4}-\d{2}-\d{2})-(?P<run>run)?(?P<hms>\d{6})(?:-(?P<tag>[0-9a-f]+))?")


@dataclass(frozen=True, slots=True)
class UnitName:
    """One job unit's name, without its suffix (.timer / .service)."""

    job: str
    kind: str  # FIRE | PERIODIC | DAILY | TRY | RUN
    session: str = ""  # ISO date; a try's id (try-...); "" for DAILY
    hms: str = ""  # HHMMSS: the fire's UTC time (PERIODIC: the first slot's); RUN: the start's
    tag: str = ""  # PERIODIC: the slot list's digest

    @property
    def instance(self) -> str:
        """What follows '@' (systemd's %i)."""
        if self.kind == DAILY:
            return "daily"
        if self.kind == TRY:
            return self.session
        if self.kind == RUN:
            return f"{self.session}-run{self.hms}"
        return f"{self.session}-{self.hms}" + (f"-{self.tag}" if self.tag else "")

    @property
    def stem(self) -> str:
        return f"{PREFIX}{self.job}@{self.instance}"

    def timer(self) -> str:
        return f"{self.stem}.timer"

    def service(self) -> str:
        return f"{self.stem}.service"

    @property
    def scheduled_utc(self) -> str:
        """A FIRE's instant as the name tells it, ISO (the session's date: a fire on another UTC
        day than its session's label gets that label's date), else ""."""
        if self.kind != FIRE:
            return ""
        return f"{self.session}T{self.hms[:2]}:{self.hms[2:4]}:{self.hms[4:]}Z"


def fire(job: str, session: date, instant: datetime) -> UnitName:
    """A session's fire at `instant` (aware UTC)."""
    return UnitName(job, FIRE, session.isoformat(),
                    f"{instant.hour:02d}{instant.minute:02d}{instant.second:02d}")  # = %H%M%S


def periodic(job: str, session: date, first: datetime, tag: str) -> UnitName:
    """A periodic job's session: its first slot and the digest of its slot list."""
    return UnitName(job, PERIODIC, session.isoformat(), f"{first:%H%M%S}", tag)


def daily(job: str) -> UnitName:
    return UnitName(job, DAILY)


def trial(job: str, try_id: str) -> UnitName:
    """`market-timers try`'s units; try_id is `try-<YYYYMMDDTHHMMSSZ>`."""
    return UnitName(job, TRY, try_id)


def manual_run(job: str, session: date, now: datetime) -> UnitName:
    """`market-timers run`'s one-off service, started at `now` (UTC)."""
    return UnitName(job, RUN, session.isoformat(), f"{now:%H%M%S}")


def parse(name: str) -> UnitName | None:
    """A job unit's name (with or without .timer/.service) as a UnitName; None when it is not
    one of the forms above (another unit, a template, a hand-made name)."""
    m = _NAME.fullmatch(name)
    i = _INSTANCE.fullmatch(m["instance"]) if m else None
    if i is None:
        return None
    job = m["job"]
    if i["daily"]:
        return daily(job)
    if i["try"]:
        return UnitName(job, TRY, i["try"])
    if i["run"]:
        return None if i["tag"] else UnitName(job, RUN, i["session"], i["hms"])
    return UnitName(job, PERIODIC if i["tag"] else FIRE, i["session"], i["hms"], i["tag"] or "")


def is_ours(name: str) -> bool:
    return parse(name) is not None


def split(name: str) -> tuple[str, str]:
    """(job, instance) of any `market-<job>@<instance>[.timer|.service]` name, also of one parse()
    does not know (sync still removes such a unit when it wrote it)."""
    job, _, instance = stem_of(name).removeprefix(PREFIX).partition("@")
    return job, instance


def job_services_glob(job: str) -> str:
    """Every service of a job (its sessions', `run`'s, `try`'s): what a halt stops."""
    return f"{PREFIX}{job}@*.service"


def on_halt_unit(now: datetime, scope: str, name: str = "") -> str:
    """The transient unit that runs the config's `on_halt` for the halt of `scope` (`name`: the
    job or group) made at `now`, to the millisecond: the unit stays loaded once it has run, and
    a scope halted, resumed and halted again within one second needs a second name."""
    return (f"{PREFIX}on-halt-{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}-{scope}"
            f"{'-' + name if name else ''}.service")


def is_on_halt_unit(unit: str) -> bool:
    return unit.startswith(f"{PREFIX}on-halt-")


def session_glob(job: str, session: str) -> str:
    """A glob for systemctl matching every unit of a (job, session)."""
    return f"{PREFIX}{job}@{session}*"


def stem_of(name: str) -> str:
    """The name without .timer / .service."""
    return name.removesuffix(".timer").removesuffix(".service")


def service_of(timer: str) -> str:
    """The service a timer starts (same stem)."""
    return stem_of(timer) + ".service"


def timer_of(service: str) -> str:
    return stem_of(service) + ".timer"
