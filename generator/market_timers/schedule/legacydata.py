"""The data a job kept before it had a user of its own, given to that user (an upgrade from 0.1).

0.1 ran every job as the package's user, and told a job to keep its files under a path of its
`read_write_paths`. Now each job runs as a user of its own (config/jobidentity.py) and the package's
user runs none, so such a path, still the package's user's, would be kept but no longer writable
by its job. Root's sync (after it made the users) gives each job's paths that the package's user
owns to the job's own user: the entries the package's user owns, group too where it is the
package's group; nothing is moved or deleted, and what another user owns is left as it is. Not
given, and said why: a path listed by two jobs (one owner cannot serve both: a [shared] directory
can) and a path inside or around the scheduler's own directories (the package's user keeps them).
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Callable

from market_timers.contracts import environment

PREFIX = "market-timers sync"


def give_to_own_users(config, package_user: str = environment.PACKAGE_USER,
                      lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam) -> None:
    """Each job of a user of its own: its `read_write_paths` that `package_user` owns, its user's."""
    try:
        package = lookup(package_user)
    except KeyError:
        return  # a host without the package's user: no 0.1 data
    listed: dict[str, list[str]] = {}
    for job in config.jobs:
        for path in dict.fromkeys(os.path.normpath(p) for p in job.read_write_paths):
            listed.setdefault(path, []).append(job.name)
    own = {job.name: config.user_of(job) for job in config.jobs if not (job.user or config.user)}
    ours = [os.path.normpath(str(d)) for d in (config.state_dir, config.spool_dir,
                                               config.runtime_dir, config.page_dir)]
    for path, jobs in listed.items():
        if not set(jobs) & set(own) or path in ours:  # a scheduler's directory itself: the
            continue  # built-in digest job's spool_dir, say; the package's user keeps it
        try:
            if os.lstat(path).st_uid != package.pw_uid:
                continue  # given already, or never the package's user's
        except OSError:
            continue
        if any(_inside(path, d) or _inside(d, path) for d in ours):
            print(f"{PREFIX}: warning: {path} ({', '.join(jobs)}'s read_write_paths) is inside or "
                  f"around the scheduler's own directories: not given to the job's user; keep "
                  "the job's data elsewhere", file=sys.stderr)
        elif len(jobs) > 1:
            print(f"{PREFIX}: warning: {path}, of {package_user}, is in the read_write_paths of "
                  f"{', '.join(jobs)}: not given to one of their users; name it in [shared] for "
                  "them all", file=sys.stderr)
        else:
            _give(path, package, package_user, own[jobs[0]], jobs[0], lookup)


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _give(path: str, package, package_user: str, user: str, job: str, lookup) -> None:
    try:
        owner = lookup(user)
    except KeyError:  # sysusers failed (said): the runner refuses the job until it exists
        return
    given, failed = 0, []
    for entry in _entries(path):
        try:
            st = os.lstat(entry)
            if st.st_uid == package.pw_uid:  # never a symlink's target: lchown
                os.lchown(entry, owner.pw_uid, owner.pw_gid if st.st_gid == package.pw_gid else -1)
                given += 1
        except OSError as e:
            failed.append(f"{entry} ({e.strerror or e})")
    print(f"{PREFIX}: {path}: {given} files of {package_user} (0.1 ran every job as "
          f"it) given to {user}, the user {job} runs as", file=sys.stderr)
    if failed:
        print(f"{PREFIX}: warning: not given: {', '.join(failed[:3])}"
              f"{', ...' if len(failed) > 3 else ''}", file=sys.stderr)


def _entries(path: str):
    """Everything under the path (no symlink followed), then the path itself: an interrupted
    sync leaves the top the package's user's, so the next one gives the rest."""
    for where, dirs, files in os.walk(path, topdown=False):
        for name in files + dirs:
            yield os.path.join(where, name)
    yield path
