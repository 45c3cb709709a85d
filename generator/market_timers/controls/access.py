"""What pause, halt and resume share: who may run them (root, or a member of the config's
`operator_group`), the job or lock group they name, the directory of their records, and the
cluster ledger.

The records are in <state_dir>/controls/ (ledger/pauses.py and ledger/halts.py name the files and
read them for the runner), or in a cluster rows of the cluster ledger, which every node reads:
root's directory, 0755, or root:<operator_group> 2775 when the config names an `operator_group`,
so that its members pause and resume without root. Only root and members of that group may run
these commands; a job (its own user, in neither) cannot write the directory.
"""

from __future__ import annotations

import grp
import os
import sys

from market_timers.contracts.exitcodes import FAILURE, USAGE
from market_timers.ledger import DatabaseError
from market_timers.ledger.pauses import controls_dir
from market_timers.ledger.pgdsn import OPERATOR_CREDENTIAL


def _allowed(config) -> str | None:
    """None when this user may pause, else why not."""
    if os.geteuid() == 0:
        return None
    group = getattr(config, "operator_group", "") or ""
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            return f"the operator_group {group!r} of {config.source} is no group on this host"
        if gid in os.getgroups():
            return None
        return (f"only root or a member of the operator group {group!r} may pause, halt or "
                "resume")
    return ("only root may pause, halt or resume (set operator_group in the config to let a "
            "group of operators do it)")


def _target(config, job: str | None, group: str | None) -> tuple[str, str]:
    """("job", name) or ("group", name), checked against the config (ValueError: why not)."""
    if job:
        if job not in {j.name for j in config.jobs}:
            raise ValueError(config.unknown_job(job))
        return "job", job
    groups = sorted({j.lock for j in config.jobs})
    if group not in groups:
        raise ValueError(f"no lock group {group!r} in {config.source} (its groups: "
                         f"{', '.join(groups) or 'none'})")
    return "group", group


def checked_target(config, job: str | None, group: str | None, command: str,
                   whole: str | None = None):
    """What pause, halt and resume check first: the caller may write controls/ (else exit 1),
    and the job or group exists (else exit 2, naming it); the (scope, name) or the exit code.
    `whole` ("orders", "all"): a halt's scope that names no job nor group."""
    why = _allowed(config)
    if why:
        print(f"market-timers {command}: {why}", file=sys.stderr)
        return FAILURE
    if whole:
        return whole, ""
    try:
        return _target(config, job, group)
    except ValueError as e:
        print(f"market-timers {command}: {e}", file=sys.stderr)
        return USAGE


def controls_directory(config) -> str:
    """controls/, made as root's (with the operator group's write) when missing."""
    path = controls_dir(config.state_dir)
    if not os.path.isdir(path) and os.geteuid() != 0:
        raise ValueError(f"{path} does not exist yet: root makes it (the first `market-timers "
                         "pause` as root)")
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o755, exist_ok=True)
    if os.geteuid() == 0:
        group = getattr(config, "operator_group", "") or ""
        try:
            gid = grp.getgrnam(group).gr_gid if group else 0
        except KeyError:
            raise ValueError(f"the operator_group {group!r} of {config.source} is no group on "
                             "this host (groupadd it first)") from None
        os.chown(path, 0, gid, follow_symlinks=False)
        os.chmod(path, 0o2775 if group else 0o755)
    return path


class cluster_book:
    """The cluster ledger for the operator's command (the DSN credential, as root), closed after
    (DatabaseError, Unreachable included, when it cannot be read or reached)."""

    def __init__(self, config):
        from market_timers.ledger.postgresql import PostgresLedger, read_operator_dsn

        # the operator role's DSN where root has it (issue 44: only it lifts a halt or a pause)
        self.book = PostgresLedger(read_operator_dsn(os.environ), config.cluster.node)

    def __enter__(self):
        return self.book

    def __exit__(self, kind, error, trace) -> None:
        self.book.close()
        if isinstance(error, DatabaseError) and error.sqlstate == "42501":
            raise DatabaseError(f"{error}: lifting a halt or a pause takes the operator role's "
                                f"DSN, root's credential {OPERATOR_CREDENTIAL} (`market-timers "
                                "cluster init --operator-role`)", error.sqlstate) from error
