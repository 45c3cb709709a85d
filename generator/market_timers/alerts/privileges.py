"""Run state-writing commands as the package's user when an operator runs them as root.

`market-timers ack`, `outbox flush`, `digest`, `deadman` and `alert --test` write under
/var/lib/market-timers and /var/spool/market-timers, which the units' User=market-timers must keep
owning: a root-owned file there would break the next handler run. So as root these commands switch
to that user first. Secrets stay root-only (0600 in /etc/credstore): the ones the command may need
are copied into a private directory owned by the user, the way LoadCredential= hands them to the
units, and removed at exit.

`run_as` is the other way: a root process (sync, the refresh) that must stay root runs one piece
of work as another user in a forked child (the refresh's alerts, the metrics' files).
"""

from __future__ import annotations

import atexit
import logging
import os
import pwd
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from market_timers.channels import NAMES, lookup
from market_timers.channels.credentials import OVERRIDE
from market_timers.contracts import environment
from market_timers.schedule.credunits import DROPIN

log = logging.getLogger("market_timers.alerts")

CREDSTORES = ("/etc/credstore", "/run/credstore", "/usr/lib/credstore")
# Where the package's units and the drop-ins sync writes for them live (root's files).
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")


def credential_names(config) -> list[str]:
    """The credentials the configured channels (from the channel registry) and the heartbeat read."""
    names = []
    alerts = getattr(config, "alerts", None)
    for channel in NAMES:
        settings = getattr(alerts, channel, None) if alerts else None
        if settings is not None:
            names += lookup(channel).credential_names(settings)
    watch = getattr(config, "watch", None)
    if watch is not None and getattr(watch, "ping_credential", None):
        names.append(watch.ping_credential)
    return names


def loaded_credential_names(unit_dirs=None) -> set[str]:
    """Every credential name a unit of the package loads: the `LoadCredential=` lines of its
    unit files and of the drop-ins sync wrote for them, root-owned files only. As root, these are
    the only names handed over: a name read from the config (or, were it writable, from the
    snapshot) can never make root copy another file of the credential store."""
    names: set[str] = set()
    for directory in unit_dirs or UNIT_DIRS:
        for path in (*Path(directory).glob("market-*.service"),
                     *Path(directory).glob(f"market-*.service.d/{DROPIN}")):
            try:
                if path.is_symlink() or path.stat().st_uid != 0:
                    continue
                text = path.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("LoadCredential="):
                    names.add(line.split("=", 1)[1].split(":", 1)[0].strip())
    return names


def names_to_hand_over(config, unit_dirs=None) -> list[str]:
    """The configured channels' credential names that a unit of the package loads; the others
    are logged and left in the store."""
    loaded = loaded_credential_names(unit_dirs)
    wanted = credential_names(config)
    for name in wanted:
        if name not in loaded:
            log.warning("alerts: credential %r is loaded by no unit of the package: not handed "
                        "over (run `market-timers sync` after renaming one)", name)
    return [n for n in wanted if n in loaded]


def become_service_user(config) -> bool:
    """As root with the package's user present: switch to it. True when switched.

    The user is always PACKAGE_USER (the config's `user` is the jobs', and nothing read from a
    file chooses who root hands secrets to); the secrets handed over are the configured channels'
    that a unit of the package loads (loaded_credential_names)."""
    if os.geteuid() != 0:
        return False
    try:
        user = pwd.getpwnam(environment.PACKAGE_USER)
    except KeyError:
        return False  # a development machine without the package's user: stay as we are
    if not os.environ.get(OVERRIDE) and not os.environ.get("CREDENTIALS_DIRECTORY"):
        _hand_over_credentials(names_to_hand_over(config), user)
    os.initgroups(user.pw_name, user.pw_gid)
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    os.environ.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return True


def _hand_over_credentials(names: list[str], user: pwd.struct_passwd) -> None:
    found = []
    for name in names:
        for store in CREDSTORES:
            if "/" not in name and (Path(store) / name).is_file():
                found.append((name, Path(store) / name))
                break
    if not found:
        return
    directory = Path(tempfile.mkdtemp(prefix="market-timers-creds."))
    for name, source in found:
        target = directory / name
        shutil.copyfile(source, target)
        os.chmod(target, 0o400)
        os.chown(target, user.pw_uid, user.pw_gid)
    os.chmod(directory, 0o700)
    os.chown(directory, user.pw_uid, user.pw_gid)
    os.environ[OVERRIDE] = str(directory)
    atexit.register(shutil.rmtree, directory, True)


def run_as(uid: int, gid: int, fn: Callable[[], object], *,
           on_error: Callable[[BaseException], object] | None = None) -> int:
    """Run fn() as uid/gid; the wait status (0: fn returned).

    As root: in a forked child that drops to uid/gid with no supplementary groups first, so the
    caller stays root and what fn writes is that user's. An exception in the child is passed to
    `on_error` (called there, inside the `except`, so it may log the traceback) and makes the
    status non-zero; the child never returns into the caller's code (os._exit). Not root: no user
    can be switched to, so fn() runs here, as we are, and its exceptions reach the caller.
    """
    if os.geteuid() != 0:
        fn()
        return 0
    pid = os.fork()
    if pid == 0:  # child: become the user, do the work, leave
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            fn()
            code = 0
        except BaseException as e:
            if on_error is not None:
                on_error(e)
        finally:
            logging.shutdown()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status
