"""The `[[job]]` tables of market-timers.toml: one Job each, every problem named.

config.parse() calls parse_job() for each table; a periodic job's keys are checked by periodic.py
and the retry keys by retries.py. Exchange calendar names are checked later, by
calendar_checks.check_config().
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, time
from typing import Any

from market_timers.config.periodic import KEYS as PERIODIC_KEYS
from market_timers.config.periodic import Periodic, parse_periodic
from market_timers.config.retries import keys as retry_keys
from market_timers.config.retries import retry_fields
from market_timers.config.sessionrules import SessionRule, parse_sessions
from market_timers.contracts import environment
from market_timers.contracts.severities import SEVERITIES
from market_timers.schema.durations import (
    DURATION_EXAMPLE,
    MAX_OFFSET,
    parse_duration,
    parse_offset,
)
from market_timers.schema.problems import Problems
from market_timers.schema.table import HIDE, Bad, Key, Table
from market_timers.schema.values import (
    AT_TIME,
    date_list,
    flag,
    one_of,
    path_problem,
    text,
    unit_unsafe,
)

EVENTS = ("open", "close", "break_start", "break_end")  # the one list (calendars, check-cron)
# Job names become part of unit names (market-<job>@<session>-<HHMMSS>.timer) and of journal
# fields: keep them to a conservative subset of systemd's unit-name characters.
JOB_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Bounds of a job's durations (seconds), with why.
MAX_GRACE = (MAX_OFFSET, "a start later than that belongs to another session")
MAX_TIMEOUT = (24 * 3600, "a run longer than a day would overlap the next session's run")
MAX_LEAD = 600  # seconds

DST_EXPLANATION = (
    "schedules in a local wall-clock time are refused: around a daylight-saving change such a "
    "time happens twice or not at all, and cron implementations disagree on what to do then. "
    "Tie market jobs to the exchange calendar (event + offset, which follows the exchange's own "
    "time zone) and write fixed jobs in UTC, e.g. at = \"02:30 UTC\""
)

REFUSED_JOB_KEYS = {"timezone", "tz", "time", "cron", "local_time"}


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
    user: str = ""  # its own user; "": the config's top-level `user`
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


# checks of single keys (a Key's check: the value to keep, or Bad) ------------------------------

# systemd's strict user-name rule (valid_user_group_name): no specifier `%`, no quoting needed.
USER_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_-]{0,30}\Z")


def job_user(value: Any) -> str:
    """`user` (top level and per job): who the job runs as. Never root nor the package's own
    user: they own the run ledger, the lock groups and the alert state that a job must not be
    able to change (runner/jobuser.py)."""
    value = text(value)
    if not USER_NAME.match(value):
        raise Bad("must be a user name: a letter or _, then letters, digits, _ or - (at most 31 "
                  "characters)")
    if value in ("root", environment.PACKAGE_USER):
        raise Bad(f"a job never runs as {value}: that user owns the scheduler's run ledger, lock "
                  f"groups and alert state; use {environment.DEFAULT_JOB_USER} (the default) or a "
                  "user of your own")
    return value


def _name(name: Any) -> str:
    if not isinstance(name, str) or not JOB_NAME.match(name):
        raise Bad("required; must match [a-z][a-z0-9_-]* (at most 40 characters): it becomes "
                  "part of systemd unit names")
    return name


def command_argv(command: Any) -> list[str]:
    """`command` (and the top-level `on_halt`): the absolute program, then its arguments."""
    if (not isinstance(command, list) or not command
            or not all(isinstance(c, str) and c for c in command)):
        raise Bad("required; a non-empty array of strings, the program first")
    if not command[0].startswith("/"):
        raise Bad("the program must be an absolute path (systemd runs it without a shell or "
                  "your PATH)", shown=command[0])
    bad = [Bad(reason, at=f"[{i}]", shown=arg) for i, arg in enumerate(command)
           if (reason := unit_unsafe(arg, tab=True))]
    if bad:
        raise Bad.each(bad)
    return command


def _unit_text(value: Any) -> str:
    """A string that goes into a unit file as it is (a calendar name, a Description=)."""
    if not isinstance(value, str):
        raise Bad("must be a string")
    if reason := unit_unsafe(value):
        raise Bad(reason)
    return value


def _calendars(value: Any) -> list[str]:
    if (not isinstance(value, list) or len(value) < 2
            or not all(isinstance(c, str) and c for c in value)):
        raise Bad("an array of at least two exchange calendar names, such as [\"XNYS\", "
                  "\"XLON\"] (one calendar: `calendar`)")
    if len(set(value)) != len(value):
        raise Bad("names a calendar twice")
    bad = [Bad(reason, at=f"[{i}]", shown=c) for i, c in enumerate(value)
           if (reason := unit_unsafe(c))]
    if bad:
        raise Bad.each(bad)
    return value


EVENT_FROM = ("earliest", "latest")


def _event_from(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Bad("one of the job's `calendars`, or earliest / latest (of their events that "
                  "day)")
    if reason := unit_unsafe(value):
        raise Bad(reason)
    return value


def _event(event: Any) -> str:
    if event not in EVENTS:
        raise Bad(f"required (or `at` for a fixed UTC time); one of {', '.join(EVENTS)}")
    return event


def _duration(limit: int, why: str):
    return lambda value: parse_duration(value, limit, why)


def _watchdog(value: Any) -> int | None:
    if value == 0 and not isinstance(value, bool):  # 0 == False: not a way to say "off"
        raise Bad(f'write "off" (or leave it out) for no watchdog, or {DURATION_EXAMPLE}')
    if value == "off" or value is False:
        return None
    return parse_duration(value, MAX_TIMEOUT[0])


def _lock(lock: Any) -> str:
    if not isinstance(lock, str) or not JOB_NAME.match(lock):
        raise Bad("lock group names follow the job-name rule [a-z][a-z0-9_-]*")
    return lock


# An environment name that says it holds a secret: its value would be in the unit file (0644
# under /etc/systemd/system: `systemctl cat` by any local user) and in `systemctl show`.
_SECRET_WORDS = {"PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY", "PRIVATEKEY", "CREDENTIAL",
                 "CREDENTIALS"}
_SECRET_PAIRS = {("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY")}


def names_a_secret(name: str) -> bool:
    words = name.upper().split("_")
    return bool(_SECRET_WORDS & set(words)) or any(
        pair in _SECRET_PAIRS for pair in zip(words, words[1:], strict=False))


def _environment(env: Any) -> dict:
    if not isinstance(env, dict):
        raise Bad('must be a table of NAME = "value"')
    bad = []
    for k, v in env.items():
        if not ENV_NAME.match(k) or k.startswith("MARKET_"):
            bad.append(Bad("names are upper case [A-Z_][A-Z0-9_]* and must not start with "
                           "MARKET_ (reserved for the job's context)", at=f".{k}", shown=HIDE))
        elif names_a_secret(k):  # the value is not shown: it may be the secret itself
            bad.append(Bad("looks like a secret, and environment values are readable by every "
                           "local user (the unit file, systemctl show): put it in the credstore "
                           "(/etc/credstore) and name it in `credentials`; the job reads "
                           "$CREDENTIALS_DIRECTORY/<name>", at=f".{k}", shown=HIDE))
            continue
        if not isinstance(v, str):
            bad.append(Bad("must be a string", at=f".{k}", shown=v))
        elif reason := unit_unsafe(v, tab=True):
            bad.append(Bad(reason, at=f".{k}", shown=v))
    if bad:
        raise Bad.each(bad)
    return env


def _read_write_paths(paths: Any) -> tuple[str, ...]:
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/")
                                              for p in paths):
        raise Bad("must be an array of absolute paths (the job's unit is sandboxed with "
                  "ProtectSystem=strict)")
    bad = [Bad(reason, at=f"[{i}]", shown=p) for i, p in enumerate(paths)
           if (reason := path_problem(p))]
    if bad:
        raise Bad.each(bad)
    return tuple(paths)


# A credential's name: a file name in the credstore, written into a LoadCredential= line.
CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,199}\Z")
PACKAGE_CREDENTIALS = "market-timers."  # the package's own: the cluster DSN, the channels', ...


def _credentials(names: Any) -> tuple[str, ...]:
    """`credentials = ["broker-api-key"]`: the job's secrets, by name (a name that is not one
    is never echoed: it may be the secret itself, pasted)."""
    if not isinstance(names, list):
        raise Bad('must be an array of credential names (files in /etc/credstore), e.g. '
                  '["broker-api-key"]')
    bad, seen = [], set()
    for i, name in enumerate(names):
        if not isinstance(name, str) or not CREDENTIAL_NAME.match(name):
            bad.append(Bad("must be a credential name (a file name in /etc/credstore: letters, "
                           "digits, '.', '_', '-', '@', '+'), not the secret itself", at=f"[{i}]",
                           shown=HIDE))
        elif name.startswith(PACKAGE_CREDENTIALS):
            bad.append(Bad(f"names starting with {PACKAGE_CREDENTIALS} are the package's own "
                           "credentials (the cluster DSN, the alert channels' secrets): a job "
                           "never gets them", at=f"[{i}]", shown=name))
        elif name in seen:
            bad.append(Bad("listed twice", at=f"[{i}]", shown=name))
        seen.add(name)
    if bad:
        raise Bad.each(bad)
    return tuple(names)


def check_credentials_against_channels(tables: list, channel_credentials: dict[str, str],
                                       problems: Problems) -> None:
    """A credential an alert channel reads (name -> channel) is the package's: no job gets it."""
    for i, t in enumerate(tables):
        names = t.get("credentials") if isinstance(t, dict) else None
        for k, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name in channel_credentials:
                problems.add(f"job[{i}].credentials[{k}]", "is the credential of "
                             f"[alerts.{channel_credentials[name]}] (the package's own): a job "
                             "never gets it; give the job a credential of its own", name)


def _requires(names: Any) -> tuple[str, ...]:
    """`requires = ["signal"]`: the names only; that they are jobs, of sessions, and form no
    cycle is checked across the jobs (config/dependencies.py)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise Bad('must be an array of job names, e.g. ["signal"]')
    bad, seen = [], set()
    for i, name in enumerate(names):
        if not JOB_NAME.match(name):
            bad.append(Bad("must be a job name ([a-z][a-z0-9_-]*)", at=f"[{i}]", shown=name))
        elif name in seen:
            bad.append(Bad("listed twice", at=f"[{i}]", shown=name))
        seen.add(name)
    if bad:
        raise Bad.each(bad)
    return tuple(names)


def _lead_seconds(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"0+(s|min|h)?", value.strip()):
        return 0  # off
    return parse_duration(value, MAX_LEAD, "the timer fires this early and the runner holds "
                          "the job's lock meanwhile")


def _at(value: Any) -> time:
    m = AT_TIME.match(value.strip()) if isinstance(value, str) else None
    if not m:
        raise Bad('must be "HH:MM UTC" or "HH:MM:SS UTC"')
    hh, mm, ss, zone = m.groups()
    if zone not in ("UTC", "Z", "utc"):
        raise Bad(DST_EXPLANATION if zone else 'name the zone: only "UTC" is accepted, e.g. '
                  '"02:30 UTC" (' + DST_EXPLANATION + ")")
    try:
        return time(int(hh), int(mm), int(ss or 0))
    except ValueError:
        raise Bad("not a valid time of day") from None


JOB = Table((
    Key("name", _name, None, "the job's name, part of its unit names", required=True),
    Key("command", command_argv, [], "the absolute program, then its arguments", required=True),
    Key("event", _event, None, "the session event: open, close, break_start or break_end "
        "(required unless `at` or `every`)", required=True),
    Key("offset", parse_offset, 0, "signed offset from the event"),
    Key("calendar", _unit_text, None, "the exchange calendar (default: the top-level calendar)"),
    Key("calendars", _calendars, None, "several exchange calendars instead of `calendar`"),
    Key("open_on", one_of(("all", "any"), "all (the days every one of `calendars` trades) or "
        "any (the days at least one does)"), "all", "with calendars: all or any"),
    Key("event_from", _event_from, "", "with calendars: whose event, or earliest / latest"),
    Key("at", _at, None, "a daily fixed UTC time instead of an event"),
    Key("grace", _duration(*MAX_GRACE), 120, "how late a start may still run (default 2min)"),
    Key("timeout", _duration(*MAX_TIMEOUT), 1800, "the longest run (default 30min)"),
    Key("watchdog", _watchdog, None, 'the longest silence of a running job; "off" by default'),
    Key("lock", _lock, None, "the lock group (default: the job's name)"),
    Key("severity", one_of(SEVERITIES, f"one of {', '.join(SEVERITIES)}"), "critical",
        "the severity of its alerts"),
    Key("skip", date_list, [], "sessions the job does not run"),
    Key("extra", date_list, [], "sessions the job runs on beside those its rule selects"),
    Key("sessions", None, None, "[job.sessions]: which sessions it runs on (sessionrules.py)"),
    Key("environment", _environment, {}, "environment variables of the job"),
    Key("description", _unit_text, "", "the units' Description="),
    Key("read_write_paths", _read_write_paths, (), "paths the sandboxed job may write"),
    Key("lead", _lead_seconds, 2, "the timer fires this early (default 2s)"),
    Key("warm", _lead_seconds, 0, "the job is started this early (default 0s)"),
    Key("enabled", flag, True, "false: the job is left out"),
    Key("user", job_user, "", "the user this job runs as (default: the top-level user)"),
    Key("credentials", _credentials, (), "the job's secrets: names of files in /etc/credstore, "
        "in $CREDENTIALS_DIRECTORY"),
    Key("pause_on_failure", flag, False, "true: its failure pauses its lock group until "
        "`market-timers resume --group`"),
    Key("requires", _requires, (), "jobs that must have succeeded in the same session first"),
    *retry_keys(),  # retries, retry_delay, retry_delay_max, orders: retries.py
    *PERIODIC_KEYS,  # every, from, until, during_break, stall_after: periodic.py
), refused={key: DST_EXPLANATION for key in REFUSED_JOB_KEYS})
JOB_KEYS = set(JOB.names)


def parse_job(t: dict, path: str, calendar: str | None, problems: Problems) -> Job | None:
    """One [[job]] table, or None (with its problems added) when it is bad or disabled."""
    before = len(problems.items)
    JOB.unknown(t, path, problems)
    name = JOB.check("name", t, path, problems)
    command = JOB.check("command", t, path, problems)
    periodic = parse_periodic(t, path, problems)  # None: not a periodic job (periodic.py)
    kw = _when(t, path, calendar, periodic, problems)
    kw.update(_durations(t, path, periodic, problems))
    kw["lead"] = JOB.check("lead", t, path, problems)
    kw["warm"] = JOB.check("warm", t, path, problems)
    if periodic is not None:
        # A periodic job's timer fires at each slot itself (its OnCalendar= lines are the slots):
        # no lead, so a `lead` set here would be a promise the timer does not keep.
        lead, kw["lead"] = kw["lead"], 0
        for key, value, what in (("lead", lead, "fired"), ("warm", kw["warm"], "started")):
            if key in t and value:  # "0s" says the same as the default: accepted
                problems.add(f"{path}.{key}", "a periodic job (`every`) fires at each slot's "
                             f"instant and is never {what} early: remove `{key}`", t[key])
    lock = JOB.check("lock", t, path, problems) or name
    severity = JOB.check("severity", t, path, problems)
    env = JOB.check("environment", t, path, problems)
    description = JOB.check("description", t, path, problems)
    kw["read_write_paths"] = JOB.check("read_write_paths", t, path, problems)
    kw.update(retry_fields(t, path, problems))
    kw["user"] = JOB.check("user", t, path, problems)
    kw["credentials"] = JOB.check("credentials", t, path, problems)
    kw["requires"] = JOB.check("requires", t, path, problems)
    kw["pause_on_failure"] = JOB.check("pause_on_failure", t, path, problems)
    enabled = JOB.check("enabled", t, path, problems)
    if len(problems.items) != before or not enabled:
        return None
    return Job(name=name, command=tuple(command), lock=lock, severity=severity,
               environment=tuple(sorted(env.items())), description=description, **kw)


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
        kw["at_utc"] = JOB.check("at", t, path, problems)
        return kw
    if periodic is not None:
        kw["event"] = periodic.get("event", "open")
    else:
        kw["event"] = JOB.check("event", t, path, problems)
    if "offset" in t:
        kw["offset"] = JOB.check("offset", t, path, problems)
    for key in ("open_on", "event_from"):
        if key in t and "calendars" not in t:
            problems.add(f"{path}.{key}", "only with `calendars` (a job on several exchanges)",
                         t[key])
    if "calendars" in t:
        kw.update(_several(t, path, problems))  # `calendar`: the first of them
    elif "calendar" in t:
        kw["calendar"] = JOB.check("calendar", t, path, problems)
    elif calendar is None:
        problems.add(f"{path}.calendar", "no calendar: set `calendar` at the top of the file "
                     "or in this job")
        kw["calendar"] = None
    else:
        kw["calendar"] = calendar
    kw["skip"] = frozenset(JOB.check("skip", t, path, problems))
    kw["extra"] = frozenset(JOB.check("extra", t, path, problems))
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
    cals = JOB.check("calendars", t, path, problems) or []
    open_on = JOB.check("open_on", t, path, problems)
    event_from = JOB.check("event_from", t, path, problems)
    if open_on == "any" and event_from and event_from not in EVENT_FROM:
        problems.add(f"{path}.event_from", f"with {path}.open_on = \"any\" a day may have no "
                     f"{event_from} session: take earliest or latest (the default: earliest)",
                     event_from)
    if not event_from:
        event_from = "earliest" if open_on == "any" else (cals[0] if cals else "")
    return {"calendars": tuple(cals), "calendar": cals[0] if cals else None,
            "open_on": open_on, "event_from": event_from}


def _durations(t: dict, path: str, periodic: dict | None, problems: Problems) -> dict[str, Any]:
    """grace, timeout and watchdog; a periodic job's own fields (and its grace default)."""
    kw: dict[str, Any] = {key: JOB.check(key, t, path, problems) for key in ("grace", "timeout")}
    if periodic:
        grace_default = periodic.pop("grace_default", None)
        kw.update(periodic)
        kw["grace"] = grace_default or kw["grace"]
    watchdog = JOB.check("watchdog", t, path, problems)
    if watchdog is not None:
        kw["watchdog"] = watchdog
        if kw["timeout"] and watchdog >= kw["timeout"]:
            problems.add(f"{path}.watchdog", f"must be shorter than the job's timeout "
                         f"({kw['timeout']} s): the timeout would end the run first",
                         t["watchdog"])
    return kw


def check_unique_names(jobs: list, problems: Problems) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(jobs):
        name = t.get("name") if isinstance(t, dict) else None
        if isinstance(name, str):
            if name in seen:
                problems.add(f"job[{i}].name", f"duplicate job name (also job[{seen[name]}])",
                             name)
            seen.setdefault(name, i)
