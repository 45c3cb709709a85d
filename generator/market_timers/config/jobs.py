"""The `[[job]]` tables of market-timers.toml: one Job each, every problem named.

Each key is one `Key` row below (its check: jobchecks.py); the row's field (`Key.field`) is the
Job field it fills, with the same default: tests/config/test_job_keys.py fails when a row and the Job
disagree. The keys are checked in the rows' order, then what involves several keys: the
keys that say when the job runs (WHEN) depend on each other and are checked by `_when`; a
periodic job's keys by periodic.py, the retries' cross-checks by retries.py. Exchange calendar
names are checked later, by calendar_checks.check_config().
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, time
from typing import Any

from market_timers.config.jobchecks import (
    DST_EXPLANATION,
    EVENT_FROM,
    EVENTS,
    JOB_NAME,
    MAX_GRACE,
    MAX_TIMEOUT,
    REFUSED_JOB_KEYS,
    USER_NAME,
    calendar_names,
    command_argv,
    credential_names,
    duration_up_to,
    environment_table,
    event_from,
    job_command,
    job_name,
    job_user,
    lead_seconds,
    lock_group,
    read_write_paths,
    required_jobs,
    session_event,
    unit_text,
    utc_time,
    watchdog,
)
from market_timers.config.jobidentity import shared_names
from market_timers.config.jobpath import job_paths
from market_timers.config.periodic import KEYS as PERIODIC_KEYS
from market_timers.config.periodic import Periodic, parse_periodic
from market_timers.config.retries import check_retries
from market_timers.config.retries import keys as retry_keys
from market_timers.config.sessionrules import SessionRule, parse_sessions
from market_timers.contracts.severities import SEVERITIES
from market_timers.schema.durations import parse_offset
from market_timers.schema.problems import Problems
from market_timers.schema.table import Key, Table
from market_timers.schema.values import date_list, flag, one_of

# Names importers take from here (the checks moved to jobchecks.py).
__all__ = ["DST_EXPLANATION", "EVENTS", "JOB", "JOB_KEYS", "JOB_NAME", "REFUSED_JOB_KEYS",
           "SEVERITIES", "USER_NAME", "Job", "check_credentials_against_channels",
           "check_unique_names", "command_argv", "job_user", "parse_job"]


@dataclass(frozen=True)
class Job:
    name: str
    command: tuple[str, ...]
    event: str | None = None  # None for a daily job at a fixed UTC time (`at`)
    offset: int = 0  # seconds, signed
    calendar: str | None = None  # as written (resolved by calendar_checks.check_config)
    at_utc: time | None = None
    grace: int = 120
    timeout: int = 1800
    watchdog: int | None = None
    lock: str = ""
    severity: str = "critical"
    skip: frozenset[date] = frozenset()
    environment: tuple[tuple[str, str], ...] = ()
    description: str = ""
    read_write_paths: tuple[str, ...] = ()
    periodic: Periodic | None = None  # `every`: slots inside a window of each session
    lead: int = 2  # the timer fires this early; the runner waits for the instant, then execs
    warm: int = 0  # exec the job this early (it waits with jobnotify.wait_for_instant())
    retries: int = 0  # retries.py: attempts after a failure (idempotent jobs only)
    retry_delay: int = 30
    retry_delay_max: int = 600
    orders: bool = False  # sends orders: never retried, nor any job of its lock group
    user: str = ""  # a user of the admin's; "": the top-level `user`, else one of its own
    shared: tuple[str, ...] = ()  # names of [shared] directories it reads and writes
    sessions: SessionRule | None = None  # [job.sessions]: which sessions (None: every one)
    extra: frozenset[date] = frozenset()  # sessions added to the rule's (the opposite of skip)
    # Several exchanges (`calendars`; `calendar` is then the first): the job's sessions are the
    # days all (open_on "all") or any of them trade; its instant is the event of `event_from`:
    # one of them, or "earliest" / "latest" of their events that day (selection.py).
    calendars: tuple[str, ...] = ()
    open_on: str = "all"
    event_from: str = ""
    credentials: tuple[str, ...] = ()  # names in the credstore, handed to the job (its secrets)
    pause_on_failure: bool = False  # its failure pauses its lock group until `resume`
    requires: tuple[str, ...] = ()  # jobs that must have succeeded in the session (config/dependencies.py)
    requires_wait: int = 0  # seconds a start waits for them to finish (runner/upstream.py)

    @property
    def all_calendars(self) -> tuple[str, ...]:
        """Every calendar the job's sessions come from, as written."""
        return self.calendars or ((self.calendar,) if self.calendar else ())

    @property
    def selects(self) -> bool:
        """True when the job runs on chosen sessions only (schedule/selection.py)."""
        return self.sessions is not None or bool(self.extra)

    @property
    def is_session_job(self) -> bool:
        return self.event is not None

    @property
    def fire_lead(self) -> int:
        """How long before the instant the timer fires: enough for the lead and the warm-up."""
        return max(self.lead, self.warm)


# Who: checked first, so a job's problems start with its name and command.
_WHO = Table((
    Key("name", job_name, None, "the job's name, part of its unit names", required=True),
    Key("command", job_command, (), "the absolute program, then its arguments", required=True),
))
# When it runs: `_when` checks these, each only where it applies (`at` excludes the others).
WHEN = Table((
    Key("event", session_event, None, "the session event: open, close, break_start or "
        "break_end (required unless `at` or `every`)", required=True),
    Key("offset", parse_offset, 0, "signed offset from the event"),
    Key("calendar", unit_text, None, "the exchange calendar (default: the top-level calendar)"),
    Key("calendars", calendar_names, (), "several exchange calendars instead of `calendar`"),
    Key("open_on", one_of(("all", "any"), "all (the days every one of `calendars` trades) or "
        "any (the days at least one does)"), "all", "with calendars: all or any"),
    Key("event_from", event_from, "", "with calendars: whose event, or earliest / latest"),
    Key("at", utc_time, None, "a daily fixed UTC time instead of an event", attr="at_utc"),
    Key("skip", date_list, frozenset(), "sessions the job does not run"),
    Key("extra", date_list, frozenset(), "sessions the job runs on beside those its rule "
        "selects"),
    Key("sessions", None, None, "[job.sessions]: which sessions it runs on (sessionrules.py)"),
))
# How it runs: each kept value is the Job field of the key's name, as checked.
_HOW = Table((
    Key("grace", duration_up_to(*MAX_GRACE), 120, "how late a start may still run (default "
        "2min)"),
    Key("timeout", duration_up_to(*MAX_TIMEOUT), 1800, "the longest run (default 30min)"),
    Key("watchdog", watchdog, None, 'the longest silence of a running job; "off" by default'),
    Key("lead", lead_seconds, 2, "the timer fires this early (default 2s)"),
    Key("warm", lead_seconds, 0, "the job is started this early (default 0s)"),
    Key("lock", lock_group, "", "the lock group (default: the job's name)"),
    Key("severity", one_of(SEVERITIES, f"one of {', '.join(SEVERITIES)}"), "critical",
        "the severity of its alerts"),
    Key("environment", environment_table, (), "environment variables of the job"),
    Key("description", unit_text, "", "the units' Description="),
    Key("read_write_paths", read_write_paths, (), "paths the sandboxed job may write"),
    *retry_keys(),  # retries, retry_delay, retry_delay_max, orders: retries.py
    Key("user", job_user, "", "the user this job runs as (default: the top-level user, else "
        "a user of its own)"),
    Key("shared", shared_names, (), "names of [shared] directories it reads and writes"),
    Key("credentials", credential_names, (), "the job's secrets: names of files in "
        "/etc/credstore, in $CREDENTIALS_DIRECTORY"),
    Key("requires", required_jobs, (), "jobs that must have succeeded in the same session "
        "first"),
    Key("requires_wait", duration_up_to(*MAX_GRACE), 0, "how long a start waits for them"),
    Key("pause_on_failure", flag, False, "true: its failure pauses its lock group until "
        "`market-timers resume --group`"),
    Key("enabled", flag, True, "false: the job is left out"),  # not a field: no Job at all
))
JOB = Table((
    *_WHO.keys, *WHEN.keys, *_HOW.keys,
    *PERIODIC_KEYS,  # every, from, until, during_break, stall_after: periodic.py (Job.periodic)
), refused={key: DST_EXPLANATION for key in REFUSED_JOB_KEYS})
JOB_KEYS = set(JOB.names)


def parse_job(t: dict, path: str, calendar: str | None, problems: Problems) -> Job | None:
    """One [[job]] table, or None (with its problems added) when it is bad or disabled."""
    before = len(problems.items)
    JOB.unknown(t, path, problems)
    kw = _WHO.values(t, path, problems)
    periodic = parse_periodic(t, path, problems)  # None: not a periodic job (periodic.py)
    kw.update(_when(t, path, calendar, periodic, problems))
    kw.update(_HOW.values(t, path, problems))
    kw["lock"] = kw["lock"] or kw["name"]
    _check_durations(kw, t, path, problems)
    if periodic is not None:
        _periodic_fields(kw, t, path, periodic, problems)
    check_retries(kw, t, path, problems)
    if len(problems.items) != before or not kw.pop("enabled"):
        return None
    return Job(**kw)


def _when(t: dict, path: str, calendar: str | None, periodic: dict | None,
          problems: Problems) -> dict[str, Any]:
    """When the job runs: `at` (daily, fixed UTC time), or event, offset, calendar and skip."""
    kw: dict[str, Any] = {}
    if "at" in t:
        for key in ("event", "offset", "calendar", "skip", "extra", "sessions",
                    "calendars", "open_on", "event_from"):
            if key in t:
                problems.add(f"{path}.{key}", "a job with `at` runs daily at a fixed UTC time "
                             "and is not tied to a session; remove `at` or this key")
        kw["at_utc"] = WHEN.check("at", t, path, problems)
        return kw
    if periodic is not None:
        kw["event"] = periodic.get("event", "open")
    else:
        kw["event"] = WHEN.check("event", t, path, problems)
    if "offset" in t:
        kw["offset"] = WHEN.check("offset", t, path, problems)
    for key in ("open_on", "event_from"):
        if key in t and "calendars" not in t:
            problems.add(f"{path}.{key}", "only with `calendars` (a job on several exchanges)",
                         t[key])
    if "calendars" in t:
        kw.update(_several(t, path, problems))  # `calendar`: the first of them
    elif "calendar" in t:
        kw["calendar"] = WHEN.check("calendar", t, path, problems)
    elif calendar is None:
        problems.add(f"{path}.calendar", "no calendar: set `calendar` at the top of the file "
                     "or in this job")
        kw["calendar"] = None
    else:
        kw["calendar"] = calendar
    kw["skip"] = frozenset(WHEN.check("skip", t, path, problems))
    kw["extra"] = frozenset(WHEN.check("extra", t, path, problems))
    for day in sorted(kw["skip"] & kw["extra"]):
        problems.add(f"{path}.extra", f"{day} is also in {path}.skip: keep it in one of them",
                     day.isoformat())
    kw["sessions"] = parse_sessions(t, path, problems)
    return kw


def _several(t: dict, path: str, problems: Problems) -> dict[str, Any]:
    """`calendars`, `open_on` and `event_from` (the names are checked by calendar_checks)."""
    if "calendar" in t:
        problems.add(f"{path}.calendars", f"a job has either `calendar` (one exchange) or "
                     f"`calendars` (several), not both: remove {path}.calendar", t["calendars"])
    cals = WHEN.check("calendars", t, path, problems)
    open_on = WHEN.check("open_on", t, path, problems)
    event_from = WHEN.check("event_from", t, path, problems)
    if open_on == "any" and event_from and event_from not in EVENT_FROM:
        problems.add(f"{path}.event_from", f"with {path}.open_on = \"any\" a day may have no "
                     f"{event_from} session: take earliest or latest (the default: earliest)",
                     event_from)
    if not event_from:
        event_from = "earliest" if open_on == "any" else (cals[0] if cals else "")
    return {"calendars": tuple(cals), "calendar": cals[0] if cals else None,
            "open_on": open_on, "event_from": event_from}


def _check_durations(kw: dict[str, Any], t: dict, path: str, problems: Problems) -> None:
    watchdog = kw["watchdog"]
    if watchdog is not None and kw["timeout"] and watchdog >= kw["timeout"]:
        problems.add(f"{path}.watchdog", f"must be shorter than the job's timeout "
                     f"({kw['timeout']} s): the timeout would end the run first", t["watchdog"])


def _periodic_fields(kw: dict[str, Any], t: dict, path: str, periodic: dict,
                     problems: Problems) -> None:
    """A periodic job's own fields (and its grace default); it is never fired nor started
    early: its timer fires at each slot itself (its OnCalendar= lines are the slots), so a
    `lead` set here would be a promise the timer does not keep."""
    grace_default = periodic.pop("grace_default", None)
    kw.update(periodic)
    kw["grace"] = grace_default or kw["grace"]
    lead, kw["lead"] = kw["lead"], 0
    for key, value, what in (("lead", lead, "fired"), ("warm", kw["warm"], "started")):
        if key in t and value:  # "0s" says the same as the default: accepted
            problems.add(f"{path}.{key}", "a periodic job (`every`) fires at each slot's "
                         f"instant and is never {what} early: remove `{key}`", t[key])


def check_credentials_against_channels(tables: list, channel_credentials: dict[str, str],
                                       problems: Problems) -> None:
    """A credential an alert channel reads (name -> channel) is the package's: no job gets it."""
    for t, path in zip(tables, job_paths(tables), strict=True):
        names = t.get("credentials") if isinstance(t, dict) else None
        for k, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name in channel_credentials:
                problems.add(f"{path}.credentials[{k}]", "is the credential of "
                             f"[alerts.{channel_credentials[name]}] (the package's own): a job "
                             "never gets it; give the job a credential of its own", name)


def check_unique_names(jobs: list, problems: Problems) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(jobs):
        name = t.get("name") if isinstance(t, dict) else None
        if isinstance(name, str):
            if name in seen:
                problems.add(f"job[{i}].name", f"duplicate job name (also job[{seen[name]}], "
                             "counting the [[job]] tables from 0)", name)
            seen.setdefault(name, i)
