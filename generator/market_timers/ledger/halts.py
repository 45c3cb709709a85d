"""Halts: the kill switch's records (`market-timers halt`), which refuse every start of the jobs
they cover until `market-timers resume` ends them.

    <state_dir>/controls/halt-orders          `halt` (no scope): every job with `orders = true`
    <state_dir>/controls/halt-all             `halt --all`: every job
    <state_dir>/controls/halt-group-<group>   `halt --group G`: every job of the lock group
    <state_dir>/controls/halt-job-<job>       `halt --job J`

The same directory and trust rule as the pauses (ledger/pauses.py): honoured only while
controls/ is root's and nobody else may write it, so that a job (its own user) can neither write
nor remove a halt. A record is `name=value` lines (ledger.format_fields): scope (orders, all,
group, job), name (the group's or the job's), by, since (UTC), host, reason. It is on disk: a
halt survives a reboot, and the runner reads it fresh at every start.

In a cluster ([cluster]) a halt is a row of the cluster ledger as well (mt_halts, through its
functions), so that it holds on every node: the runner asks the ledger it opened (`book`, one
call per check), and each node's `market-timers halt-watch` (controls/haltwatch.py) listens for
the ledger's notification and stops the runs a new halt covers on its host. A file here still
counts on a cluster node: the halt made while the ledger could not be reached.

The runner reads at most four small files per start (halted()); `os` only.
"""

import os

from market_timers.contracts import environment
from market_timers.ledger.pauses import controls_dir, read_record, trusted_controls

SCOPES = ("orders", "all", "group", "job")
_PREFIX = "halt-"


def record_name(scope: str, name: str = "") -> str:
    """The controls/ file of a halt: halt-orders, halt-all, halt-group-G, halt-job-J."""
    return f"{_PREFIX}{scope}-{name}" if scope in ("group", "job") else f"{_PREFIX}{scope}"


def describe(scope: str, name: str = "") -> str:
    """A halt's scope for a person: "order jobs", "every job", "lock group G", "job J"."""
    return {"orders": "order jobs (orders = true)", "all": "every job",
            "group": f"lock group {name}", "job": f"job {name}"}[scope]


def resume_command(scope: str, name: str = "") -> str:
    return {"orders": "market-timers resume --orders", "all": "market-timers resume --all",
            "group": f"market-timers resume --group {name}",
            "job": f"market-timers resume {name}"}[scope]


def covers(scope: str, name: str, job: str, group: str, orders: bool) -> bool:
    """Whether a halt of (scope, name) covers that job."""
    return (scope == "all" or (scope == "orders" and orders)
            or (scope == "group" and name == group) or (scope == "job" and name == job))


def read(state_dir, scope: str, name: str = "") -> dict | None:
    """The halt record of (scope, name) when controls/ is trusted, with `what` and `resume`."""
    if not trusted_controls(state_dir):
        return None
    found = read_record(os.path.join(controls_dir(state_dir), record_name(scope, name)))
    return labelled(found, scope, name) if found is not None else None


def halted(state_dir, job: str, group: str, orders: bool, warn=None, book=None,
           cluster=None) -> dict | None:
    """The halt that covers the job (the widest first: all, orders, group, job) with `what` and
    `resume`, or None. `warn(text)`: told when controls/ is not to be trusted. `book`: the
    cluster ledger, asked for its halts (DatabaseError propagates); or `cluster`, its records
    read already (cluster_records); a local `book`: the cluster's halts as this node's halt-watch
    last mirrored them (haltmirror.py: none on a host outside a cluster)."""
    found = _local_halt(state_dir, job, group, orders, warn)
    if found is None and cluster is None and book is not None and \
            not hasattr(book, "halt_list"):  # the local ledger: the cluster's as last mirrored
        mirror = os.environ.get(environment.HALT_MIRROR_DIR) or \
            environment.DEFAULT_HALT_MIRROR_DIR
        if os.path.isdir(mirror):  # a cluster node's (a single host has none: no import)
            from market_timers.ledger import haltmirror

            cluster = haltmirror.records(mirror)
    if found is None and (cluster is not None or hasattr(book, "halt_list")):
        found = cluster_halt(cluster if cluster is not None else book.halt_list(), job, group,
                             orders)
    return found


def cluster_records(book) -> list[tuple[str, str, dict]] | None:
    """Every halt of the cluster ledger, or None for a local ledger."""
    return book.halt_list() if hasattr(book, "halt_list") else None


def cluster_halt(records, job: str, group: str, orders: bool) -> dict | None:
    """The first of the cluster's halt records (scope, name, fields) that covers the job."""
    for wanted in ("all", "orders", "group", "job"):
        for scope, name, fields in records:
            if scope == wanted and covers(scope, name, job, group, orders):
                return labelled(fields, scope, name, cluster=True)
    return None


def cluster_record(records, scope: str, name: str = "") -> dict | None:
    """The cluster's record of the halt (scope, name) itself, labelled, or None."""
    for found_scope, found_name, fields in records:
        if (found_scope, found_name) == (scope, name or ""):
            return labelled(fields, scope, name, cluster=True)
    return None


def labelled(fields: dict, scope: str, name: str, cluster: bool = False) -> dict:
    """A halt record with its scope, name, `what` and `resume` (and `cluster`: the ledger's)."""
    return dict(fields, scope=scope, name=name, what=describe(scope, name),
                resume=resume_command(scope, name), **({"cluster": True} if cluster else {}))


def _local_halt(state_dir, job: str, group: str, orders: bool, warn) -> dict | None:
    trusted = trusted_controls(state_dir)
    if not trusted:
        if trusted is False and warn is not None:
            warn(f"{controls_dir(state_dir)} is not root's own directory: its halts are ignored "
                 "(only root, or the configured operator group, may halt)")
        return None
    for scope, name in (("all", ""), ("orders", ""), ("group", group), ("job", job)):
        if scope == "orders" and not orders:
            continue
        found = read(state_dir, scope, name)
        if found is not None:
            return found
    return None


def current(state_dir, cluster=None) -> list[dict]:
    """Every halt in force (status, the digest, the metrics), each with scope, name, what, by,
    since, host, reason and resume: this host's records ([] when controls/ is missing or not
    trusted), then `cluster`'s (cluster_records) that are not among them."""
    out = _local_current(state_dir)
    for scope, name, fields in cluster or []:
        if not any((h["scope"], h["name"]) == (scope, name) for h in out):
            out.append(labelled(fields, scope, name, cluster=True))
    return out


def in_force(config) -> list[dict]:
    """current() for a config: with [cluster], the cluster ledger's halts too (this host's own
    alone when the ledger cannot be reached). The digest and the metrics."""
    cluster = None
    if getattr(config, "cluster", None) is not None:
        from market_timers.ledger import DatabaseError, for_config

        book = None
        try:
            book = for_config(config)
            cluster = cluster_records(book)
        except DatabaseError:
            cluster = None
        finally:
            if book is not None:
                book.close()
    return current(str(config.state_dir), cluster)


def _local_current(state_dir) -> list[dict]:
    if not trusted_controls(state_dir):
        return []
    try:
        names = sorted(os.listdir(controls_dir(state_dir)))
    except OSError:
        return []
    out = []
    for file in names:
        if not file.startswith(_PREFIX):
            continue
        scope, _, name = file[len(_PREFIX):].partition("-")
        if scope not in SCOPES or bool(name) != (scope in ("group", "job")):
            continue
        found = read(state_dir, scope, name)
        if found is not None:
            out.append(found)
    return out
