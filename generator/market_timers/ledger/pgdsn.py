"""The cluster DSN of a start and of its record step: read from the unit's credential, and handed
from the start to its own record step (systemd does not reliably give the latter credentials).
"""

from __future__ import annotations

import os

from market_timers.contracts import environment
from market_timers.ledger import LoginRefused


def read_dsn(env) -> str:
    """The DSN from the unit's credential (LoadCredential=market-timers.cluster-dsn); in the
    record step, whose credentials systemd does not reliably provide, the start's hand-off.
    LoginRefused when there is none: a node without its credential is misconfigured, not cut
    off (never run outside the ledger for it)."""
    path = env.get(environment.CLUSTER_DSN_FILE) or os.path.join(
        env.get("CREDENTIALS_DIRECTORY") or "/etc/credstore", "market-timers.cluster-dsn")
    try:
        with open(path, encoding="utf-8") as f:
            dsn = f.read().strip()
    except OSError as e:
        handed = _read_hand_off(env)
        if handed:
            return handed
        raise LoginRefused(f"cannot read the cluster DSN credential {path}: "
                           f"{e.strerror}") from None
    if not dsn:
        raise LoginRefused(f"the cluster DSN credential {path} is empty")
    return dsn


# The operator role's DSN (issue 44): lifting a halt or a pause is that role's only
# (pgschema.OPERATOR_ONLY). Root's credential, never a unit's: the package user's processes read
# a node's DSN, so they must not be able to lift the kill switch.
OPERATOR_CREDENTIAL = "/etc/credstore/market-timers.cluster-operator-dsn"


def read_operator_dsn(env) -> str:
    """The operator role's DSN for the operator's commands (halt, pause, resume); the node's
    (read_dsn) where there is none: a ledger initialised without --operator-role."""
    path = env.get(environment.CLUSTER_OPERATOR_DSN_FILE) or OPERATOR_CREDENTIAL
    try:
        with open(path, encoding="utf-8") as f:
            dsn = f.read().strip()
    except OSError:
        dsn = ""
    return dsn or read_dsn(env)


# The DSN handed from a start to its own record step. systemd gives a unit's credentials to
# ExecStart=; to ExecStopPost= not reliably: under ProtectSystem=strict with ReadWritePaths= (every
# job unit), systemd 252 leaves /run/credentials/<unit> unreadable there most of the time
# (Permission denied in 12 of 15 stops of a probe unit on booted Debian 12; systemd issue 32583).
# Without the DSN the record step could not finish the run in the cluster ledger (status, a
# downstream's `requires` and pause_on_failure then saw it still running). So the start writes
# it to <runtime dir>/ledger-dsn/<INVOCATION_ID>: the runner's user's 0700 directory, the file
# 0600 (the job, another user, cannot read it), and the record step removes it.
HAND_OFF_DIR = "ledger-dsn"


def _hand_off_path(env) -> str | None:
    invocation = env.get("INVOCATION_ID") or ""
    if not invocation.isalnum():
        return None
    return os.path.join(env.get(environment.LOCK_DIR) or environment.DEFAULT_RUNTIME_DIR,
                        HAND_OFF_DIR, invocation)


def hand_off_dsn(env, dsn: str) -> None:
    """The start: leave the DSN for this invocation's record step (best effort)."""
    path = _hand_off_path(env)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        st = os.lstat(os.path.dirname(path))
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return  # not this user's own private directory: hand nothing over
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, dsn.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _read_hand_off(env) -> str | None:
    path = _hand_off_path(env)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode("utf-8", "replace").strip() or None
    finally:
        os.close(fd)


def drop_hand_off(env) -> None:
    """The record step, done: the DSN it was handed is removed."""
    path = _hand_off_path(env)
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass
