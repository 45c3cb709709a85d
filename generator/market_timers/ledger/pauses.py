"""Pauses: the records that hold a job, or a lock group, out of its sessions until `resume`.

    <state_dir>/controls/pause-job-<job>          `market-timers pause JOB` (root's)
    <state_dir>/controls/pause-group-<group>      `market-timers pause --group G` (root's)
    <state_dir>/controls/resumed-group-<group>    `resume --group G`: when (ends a failure pause)
    <state_dir>/ledger/paused-groups/<group>      `pause_on_failure`: written by the record step

controls/ is root's (0755; with the config's `operator_group`, root:<group> 2775, so that the
operators' group writes it too): like sync/, nothing the package's user or a job writes decides
it. The runner honours a pause there only when the directory is root's and nobody else may write
it (a planted directory is ignored, with a warning). A failure pause is the scheduler's own note
(its ledger: the package user's, which no job can write), and ends when `resume --group` is
later than it (a stamp in controls/, so an operator who is not root can resume).

A record is `name=value` lines (ledger.format_fields): by, since (UTC), note, until (a session
date: sessions before it are paused, that one runs) and, for a failure pause, job and session.

In a cluster ([cluster]) the pauses live in the cluster ledger instead (mt_pauses, through its
functions: scopes "job", "group" and "failure"), so that a pause made on any node holds the job on
every node: a pause held by one node alone would hold nothing, since its refused start takes no
claim and the standby would claim and run the session. `resume` deletes the row (no stamp
needed). The runner asks the ledger it already opened (`book.pauses_of`, one call per start);
the files above still count on a cluster node (a pause made before the cluster was configured).

The runner reads at most four small files per start (paused()); `os` only.
"""

import os
import stat

from market_timers.ledger import LEDGER_DIR, format_fields, parse_fields

CONTROLS_DIR = "controls"
FAILURE_DIR = "paused-groups"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def controls_dir(state_dir) -> str:
    return os.path.join(state_dir, CONTROLS_DIR)


def failure_dir(state_dir) -> str:
    return os.path.join(state_dir, LEDGER_DIR, FAILURE_DIR)


def record_name(scope: str, name: str) -> str:
    """scope "job" or "group": the controls/ file of a pause."""
    return f"pause-{scope}-{name}"


def read_record(path: str) -> dict | None:
    """A controls/ (or failure pause) record's fields; None when missing, not a regular file or a
    symlink (never followed). ledger/halts.py reads its records with it too."""
    try:
        fd = os.open(path, _READ)
    except OSError:  # missing, or a symlink (never followed)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return parse_fields(os.read(fd, 65536).decode("utf-8", "replace"))
    finally:
        os.close(fd)


def trusted_controls(state_dir) -> bool | None:
    """True: controls/ is root's and no one else may write it; None: there is none; False: it is
    someone else's (not to be trusted)."""
    try:
        st = os.stat(controls_dir(state_dir), follow_symlinks=False)
    except OSError:
        return None
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o002


def paused(state_dir, job: str, group: str, session: str, warn=None, book=None,
           cluster=None) -> dict | None:
    """The pause that holds (job, session), with `scope` ("job signal", "lock group orders") and
    `resume` (the command that ends it), or None. A pause whose `until` is at or before the
    session no longer holds it. `warn(text)`: told when controls/ is not to be trusted. `book`:
    the cluster ledger, asked for its pauses of the job and group (DatabaseError propagates);
    or `cluster`, the records of the whole cluster read already (cluster_records)."""
    found = _local_pause(state_dir, job, group, session, warn)
    if found is None and (cluster is not None or hasattr(book, "pauses_of")):
        records = cluster if cluster is not None else book.pauses_of(job, group)
        found = cluster_pause(records, job, group, session)
    return found


def cluster_records(book) -> list[tuple[str, str, dict]] | None:
    """Every pause in the cluster ledger (status, the deadman: one call a pass), or None for a
    local ledger."""
    return book.pause_list() if hasattr(book, "pause_list") else None


def cluster_pause(records, job: str, group: str, session: str) -> dict | None:
    """The first of the cluster's pause records (scope, name, fields) that holds (job, session):
    the job's own, then its lock group's, then the group's failure pause."""
    for kind, name, what in (("job", job, f"job {job}"), ("group", group, f"lock group {group}"),
                             ("failure", group, f"lock group {group}")):
        for scope, named, fields in records:
            if (scope, named) == (kind, name) and (kind == "failure" or holds(fields, session)):
                return dict(fields, scope=what,
                            resume=_resume("job" if kind == "job" else "group", name))
    return None


def _local_pause(state_dir, job: str, group: str, session: str, warn) -> dict | None:
    trusted = trusted_controls(state_dir)
    if trusted:
        for scope, name, what in (("job", job, f"job {job}"),
                                  ("group", group, f"lock group {group}")):
            found = read_record(os.path.join(controls_dir(state_dir), record_name(scope, name)))
            if found is not None and holds(found, session):
                found["scope"], found["resume"] = what, _resume(scope, name)
                return found
    failed = read_record(os.path.join(failure_dir(state_dir), group))
    if failed is not None:
        resumed = read_record(os.path.join(controls_dir(state_dir), f"resumed-group-{group}")) \
            if trusted else None
        if resumed is None or str(resumed.get("since", "")) < str(failed.get("since", "")):
            failed["scope"], failed["resume"] = f"lock group {group}", _resume("group", group)
            return failed
    if trusted is False and warn is not None:
        warn(f"{controls_dir(state_dir)} is not root's own directory: its pauses are ignored "
             "(only root, or the configured operator group, may pause)")
    return None


def holds(record: dict, session: str) -> bool:
    """Whether a pause record holds that session (its `until` is later, or it has none)."""
    until = str(record.get("until") or "")
    return not until or session < until


def _resume(scope: str, name: str) -> str:
    return f"market-timers resume {'--group ' if scope == 'group' else ''}{name}"


def write_failure_pause(state_dir, group: str, fields: dict) -> None:
    """`pause_on_failure` (the record step, as the package's user): the group's failure pause."""
    directory = failure_dir(state_dir)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    # writers only: the runner's pause check loads none of it
    from market_timers.files import atomicfile

    atomicfile.write(os.path.join(directory, group), format_fields(fields), mode=0o640)
