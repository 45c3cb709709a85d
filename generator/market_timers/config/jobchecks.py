"""The checks of single `[[job]]` keys: each takes the value as written and returns the value to
keep, or raises Bad with the reason (schema/table.py). config/jobs.py's Key rows name them.
"""

from __future__ import annotations

import re
from datetime import time
from typing import Any

from market_timers.contracts import environment
from market_timers.schema.durations import (
    DURATION_EXAMPLE,
    MAX_OFFSET,
    parse_duration,
)
from market_timers.schema.table import HIDE, Bad
from market_timers.schema.values import AT_TIME, path_problem, text, unit_unsafe

EVENTS = ("open", "close", "break_start", "break_end")  # the one list (calendars, check-cron)
# Job names become part of unit names (market-<job>@<session>-<HHMMSS>.timer) and of journal
# fields: keep them to a conservative subset of systemd's unit-name characters.
JOB_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*\Z")
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
                  f"groups and alert state; leave `user` out (each job a user of its own) or "
                  "name a user of your own")
    return value


def job_name(name: Any) -> str:
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


def job_command(command: Any) -> tuple[str, ...]:
    return tuple(command_argv(command))


def unit_text(value: Any) -> str:
    """A string that goes into a unit file as it is (a calendar name, a Description=)."""
    if not isinstance(value, str):
        raise Bad("must be a string")
    if reason := unit_unsafe(value):
        raise Bad(reason)
    return value


def calendar_names(value: Any) -> list[str]:
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


def event_from(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Bad("one of the job's `calendars`, or earliest / latest (of their events that "
                  "day)")
    if reason := unit_unsafe(value):
        raise Bad(reason)
    return value


def session_event(event: Any) -> str:
    if event not in EVENTS:
        raise Bad(f"required (or `at` for a fixed UTC time); one of {', '.join(EVENTS)}")
    return event


def duration_up_to(limit: int, why: str):
    return lambda value: parse_duration(value, limit, why)


def watchdog(value: Any) -> int | None:
    if value == 0 and not isinstance(value, bool):  # 0 == False: not a way to say "off"
        raise Bad(f'write "off" (or leave it out) for no watchdog, or {DURATION_EXAMPLE}')
    if value == "off" or value is False:
        return None
    return parse_duration(value, MAX_TIMEOUT[0])


def lock_group(lock: Any) -> str:
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


def environment_table(env: Any) -> tuple[tuple[str, str], ...]:
    """`environment`: kept as sorted (name, value) pairs, the order of the unit's lines."""
    if not isinstance(env, dict):
        raise Bad('must be a table of NAME = "value"')
    bad = []
    for k, v in env.items():
        if not ENV_NAME.match(k) or k.startswith("MARKET_"):
            label = k if k.isprintable() else repr(k)  # a problem stays one line
            bad.append(Bad("names are upper case [A-Z_][A-Z0-9_]* and must not start with "
                           "MARKET_ (reserved for the job's context)", at=f".{label}",
                           shown=HIDE))
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
    return tuple(sorted(env.items()))


def read_write_paths(paths: Any) -> tuple[str, ...]:
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


def credential_names(names: Any) -> tuple[str, ...]:
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


def required_jobs(names: Any) -> tuple[str, ...]:
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


def lead_seconds(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"0+(s|min|m|h)?", value.replace(" ", "")):
        return 0  # off
    return parse_duration(value, MAX_LEAD, "the timer fires this early and the runner holds "
                          "the job's lock meanwhile")


def utc_time(value: Any) -> time:
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


