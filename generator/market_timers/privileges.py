"""Run state-writing commands as the package's user when an operator runs them as root.

`market-timers ack`, `outbox flush`, `digest`, `deadman` and `alert --test` write under
/var/lib/market-timers and /var/spool/market-timers, which the units' User=market-timers must keep
owning: a root-owned file there would break the next handler run. So as root these commands switch
to that user first. Secrets stay root-only (0600 in /etc/credstore): the ones the command may need
are copied into a private directory owned by the user, the way LoadCredential= hands them to the
units, and removed at exit.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import tempfile
from pathlib import Path

from .alerts.credentials import OVERRIDE

CREDSTORES = ("/etc/credstore", "/run/credstore", "/usr/lib/credstore")


def credential_names(config) -> list[str]:
    """The credentials the configured channels (from the channel registry) and the heartbeat read."""
    from .alerts.channels import NAMES, lookup

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


def become_service_user(config) -> bool:
    """As root with the config's user present: switch to it. True when switched."""
    if os.geteuid() != 0:
        return False
    try:
        user = pwd.getpwnam(config.user)
    except KeyError:
        return False  # a development machine without the package's user: stay as we are
    if not os.environ.get(OVERRIDE) and not os.environ.get("CREDENTIALS_DIRECTORY"):
        _hand_over_credentials(credential_names(config), user)
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
