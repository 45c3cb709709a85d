"""The cluster's halts mirrored on each node, for the start that cannot reach the ledger (issue 44).

A cluster halt is a row of the cluster ledger (ledger/halts.py), so a node cut off from the
ledger could not see it: with on_db_unreachable = "run" it ran what the halt covers. Each node's
halt-watch (controls/haltwatch.py, root) writes, at every look, the halts in force here:

    /var/lib/market-halt-watch/halt-orders, halt-all, halt-group-G, halt-job-J   (halts.py names)
    /var/lib/market-halt-watch/looked                                           (its last look)

(MARKET_HALT_MIRROR_DIR overrides the directory: the tests'.) The unit's StateDirectory=, root's
0755; honoured only while it is root's and nobody else may write it, like controls/. The runner
reads it on the local ledger only (the cluster's own answer wins whenever it can be had), and
the dead-man reads `looked` (watch/haltwatch_fresh.py). Standard library only: the runner's.
"""

import os
import stat

from market_timers.contracts import environment
from market_timers.ledger import format_fields

DEFAULT_DIR = environment.DEFAULT_HALT_MIRROR_DIR
LOOKED = "looked"
_PREFIX = "halt-"


def mirror_dir(env=None) -> str:
    env = os.environ if env is None else env
    return env.get(environment.HALT_MIRROR_DIR) or DEFAULT_DIR


def trusted(path: str) -> bool:
    """The mirror is root's directory and no one else may write it (never a symlink)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def write(path: str, records) -> None:
    """halt-watch's look: the mirror holds exactly `records` (scope, name, fields), and `looked`
    says when. OSError when it cannot be written (halt-watch says so and fails its look)."""
    from market_timers.files import atomicfile
    from market_timers.ledger.halts import SCOPES, record_name

    os.makedirs(path, mode=0o755, exist_ok=True)
    os.chmod(path, 0o755)
    if not trusted(path):
        raise OSError(f"{path} is not root's own directory (0755): the halt mirror is not kept")
    wanted = {}
    for scope, name, fields in records:
        if scope in SCOPES and "/" not in name and not name.startswith("."):
            wanted[record_name(scope, name)] = format_fields(dict(fields, scope=scope,
                                                                  name=name))
    for file, text in wanted.items():
        atomicfile.write(os.path.join(path, file), text, mode=0o644)
    for file in os.listdir(path):
        if file.startswith(_PREFIX) and file not in wanted:
            os.unlink(os.path.join(path, file))
    atomicfile.write(os.path.join(path, LOOKED), f"pid={os.getpid()}\n", mode=0o644)


def clear(path: str) -> None:
    """No cluster here (any more): no mirrored halt holds this host."""
    if trusted(path):
        for file in os.listdir(path):
            if file.startswith(_PREFIX):
                os.unlink(os.path.join(path, file))


def records(path: str) -> list[tuple[str, str, dict]]:
    """The mirrored halts as (scope, name, fields); [] when the mirror is missing or not
    trusted."""
    from market_timers.ledger.pauses import read_record

    if not trusted(path):
        return []
    out = []
    for file in sorted(os.listdir(path)):
        if file.startswith(_PREFIX):
            found = read_record(os.path.join(path, file))
            if found is not None and found.get("scope"):
                out.append((found["scope"], found.get("name", ""), found))
    return out


def last_look(path: str) -> float | None:
    """When halt-watch last looked (epoch seconds), or None: it never did, or not trusted."""
    if not trusted(path):
        return None
    try:
        return os.stat(os.path.join(path, LOOKED), follow_symlinks=False).st_mtime
    except OSError:
        return None
