"""Who each job runs as (issue 41): by default a user of its own, so that no job reads another's
files, credentials or /proc entries, or signals its processes; jobs share data only through a
directory the config names in [shared] and each lists in its `shared`, by a group of their own.

The names are made here, once: `market-timers sync` (schedule/jobusers.py) makes the users,
groups and directories; render.py names the user and the writable directories in each unit.
"""

from __future__ import annotations

import grp
import hashlib
import pwd
import re
from typing import Any

from market_timers.config.jobpath import paths_by_name
from market_timers.contracts import environment
from market_timers.schema.table import Bad
from market_timers.schema.values import absolute_path

OWN_HOMES = "/var/lib/market-timers-jobs"  # the parent of the jobs' own homes (root, 0755)
OWN_USER_PREFIX = "market-job-"
SHARE_GROUP_PREFIX = "market-share-"
MAX_USER = 31  # systemd's and shadow's limit on a user or group name
SHARE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,17}\Z")  # the group's name stays within MAX_USER


def own_user(job_name: str) -> str:
    """`market-job-<name>`; a name too long for that keeps its start and a hash of the whole."""
    name = OWN_USER_PREFIX + job_name
    if len(name) <= MAX_USER:
        return name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    return f"{OWN_USER_PREFIX}{job_name[:MAX_USER - len(OWN_USER_PREFIX) - 9]}-{digest}"


def user_of(config, job) -> str:
    return job.user or config.user or own_user(job.name)


def home_of(config, job) -> str | None:
    """The job's writable home: its own (a user of its own), the default shared user's, or None
    (a user of the admin's, whose home is not the package's to open)."""
    if not (job.user or config.user):
        return f"{OWN_HOMES}/{job.name}"
    return environment.DEFAULT_JOB_HOME if user_of(config, job) == environment.DEFAULT_JOB_USER else None


def shared_group(name: str) -> str:
    return SHARE_GROUP_PREFIX + name


def shared_names(value: Any) -> tuple[str, ...]:
    """A job's `shared`: names of [shared] directories (checked against them by check_jobs)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Bad("must be an array of names of [shared] directories")
    return tuple(value)


def parse_shared(raw: Any, problems) -> dict[str, str]:
    """[shared]: name = "/absolute/directory"; each name becomes a group (market-share-<name>)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add("shared", 'must be a table of name = "/absolute/directory"', raw)
        return {}
    out = {}
    for name, path in raw.items():
        if not SHARE_NAME.match(name):
            problems.add(f"shared.{name}", "a name must match [a-z][a-z0-9_-]* (at most 18 "
                         f"characters): it becomes the group {SHARE_GROUP_PREFIX}<name>")
            continue
        try:
            out[name] = absolute_path(path)
        except Bad as e:
            problems.add(f"shared.{name}", str(e), path)
    return out


def check_jobs(tables: list, config, problems) -> None:
    """Secrets never on a user another job runs as; `shared` names known; no job among the
    operators (a job that could halt, pause and resume could lift its own halt)."""
    paths = paths_by_name(tables)
    users: dict[str, list[str]] = {}
    for job in config.jobs:
        users.setdefault(user_of(config, job), []).append(job.name)
    for job in config.jobs:
        at = paths.get(job.name, f"job.{job.name}")
        user = user_of(config, job)
        others = [n for n in users[user] if n != job.name]
        if job.credentials and others:
            problems.add(f"{at}.credentials", f"the job runs as {user!r}, as do "
                         f"{', '.join(others)}: they could read its secrets while it runs; "
                         "leave `user` out (each job a user of its own) or give it one",
                         job.credentials[0] if len(job.credentials) == 1 else
                         list(job.credentials))
        for k, name in enumerate(job.shared):
            if name not in config.shared:
                problems.add(f"{at}.shared[{k}]", "no directory of that name in [shared] "
                             f"({', '.join(sorted(config.shared)) or 'none'})", name)
        if config.operator_group and job.user == config.operator_group:
            problems.add(f"{at}.user", f"is the operator_group {config.operator_group!r}: its "
                         "members may halt, pause and resume, and a job could lift its own "
                         "halt", job.user)
        elif config.operator_group and (how := operator_membership(user, config.operator_group)):
            problems.add(f"{at}.user", f"job {job.name!r}: its user {user!r} has the "
                         f"operator_group {config.operator_group!r} as its {how} group: its "
                         "members may halt, pause and resume, and the job could lift its own "
                         "halt; take the user out of the group or give the job another user",
                         user)


def operator_membership(user: str, group: str) -> str | None:
    """"primary" or "supplementary" when this host's `user` is in `group`, else None (a user or
    group this host lacks yet: the runner checks again at each start)."""
    try:
        entry = grp.getgrnam(group)
        if pwd.getpwnam(user).pw_gid == entry.gr_gid:
            return "primary"
    except KeyError:
        return None
    return "supplementary" if user in entry.gr_mem else None
