"""`requires` across the jobs: every name a job requires is an enabled job of sessions, and the
graph has no cycle. Each problem names the key (`job.closing.requires[0]`) and the value.

A requirement holds within one exchange session (the run ledger's key is (job, session)), so both
ends are session jobs: a daily job at a fixed UTC time (`at`) has no session, and a periodic job
(`every`) runs many slots a session, none of which is "the" run. The runner checks the ledger at
the downstream's start (runner/upstream.py); that the upstream's instant comes first is the
operator's to arrange (`market-timers plan` shows both).
"""

from __future__ import annotations

from market_timers.config.jobpath import paths_by_name
from market_timers.schema.problems import Problems


def check_requires(tables: list, jobs: list, problems: Problems) -> None:
    by_name = {j.name: j for j in jobs}
    raw = {t.get("name"): t for t in tables if isinstance(t, dict)}
    paths = paths_by_name(tables)
    for job in jobs:
        _check_wait(job, paths.get(job.name, f"job.{job.name}"), raw.get(job.name, {}), problems)
        for k, name in enumerate(job.requires):
            where = f"{paths.get(job.name, 'job.' + job.name)}.requires[{k}]"
            upstream = by_name.get(name)
            if upstream is None:
                if name in raw and raw[name].get("enabled") is False:
                    problems.add(where, f"job {name!r} is disabled (enabled = false): it never "
                                 f"runs, so {job.name} never would", name)
                elif name in raw:
                    pass  # the upstream's own problems are reported at its table
                else:
                    problems.add(where, "no job of that name in this config", name)
                continue
            for end, other in (("it", job), (name, upstream)):
                if not other.is_session_job or other.periodic is not None:
                    kind = "a periodic job (`every`)" if other.periodic is not None else \
                        "a daily job at a fixed UTC time (`at`)"
                    problems.add(where, f"{'this job' if end == 'it' else name} is {kind}: "
                                 "`requires` holds within one exchange session, between jobs "
                                 "that run once a session (event + offset)", name)
                    break
    for cycle in _cycles(jobs):
        problems.add(f"{paths.get(cycle[0], 'job.' + cycle[0])}.requires", "a cycle: " + " -> ".join(cycle) + ": none of "
                     "these jobs could ever start", list(by_name[cycle[0]].requires))


def _check_wait(job, path: str, table: dict, problems: Problems) -> None:
    """`requires_wait`: with `requires` only, and no longer than the grace (a start waiting
    past its instant + grace would be a stale start; the wait ends there anyway)."""
    if not job.requires_wait:
        return
    if not job.requires:
        problems.add(f"{path}.requires_wait", "only with `requires`: it is how long a start "
                     "waits for the jobs it requires", table.get("requires_wait"))
    elif job.requires_wait > job.grace:
        problems.add(f"{path}.requires_wait", f"must be at most the job's grace ({job.grace} s):"
                     " a start that waited longer would be a stale start", table.get(
                         "requires_wait"))


def _cycles(jobs: list) -> list[list[str]]:
    """Each cycle once, as [a, b, ..., a], starting at its first job in the config's order."""
    edges = {j.name: [n for n in j.requires] for j in jobs}
    order = {j.name: n for n, j in enumerate(jobs)}
    found, seen = [], set()
    for start in edges:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in edges.get(node, []):
                if nxt == start:
                    cycle = path + [start]
                    members = frozenset(path)
                    if members not in seen and min(path, key=order.get) == start:
                        seen.add(members)
                        found.append(cycle)
                elif nxt not in path and nxt in edges:
                    stack.append((nxt, path + [nxt]))
    return found


def chain(requires: dict, name: str) -> list[str]:
    """The jobs `name` requires, transitively, nearest first. `requires`: job -> its names."""
    out: list[str] = []
    todo = list(requires.get(name, ()))
    while todo:
        n = todo.pop(0)
        if n not in out and n != name:
            out.append(n)
            todo.extend(requires.get(n, ()))
    return out


def notes(requires: dict) -> list[str]:
    """One line per job with `requires` (job -> its names), for the notes under `plan` and
    `status`: "orders requires signal: it starts only if it succeeded in its session (chain:
    prices -> signal -> orders)"; the chain only when it is longer than the job's own list."""
    out = []
    for name, names in requires.items():
        if not names:
            continue
        line = f"{name} requires {', '.join(names)}: it starts only if " \
               f"{'it' if len(names) == 1 else 'each'} succeeded in its session"
        upstream = chain(requires, name)
        if len(upstream) > len(names):
            line += f" (chain: {' -> '.join([*reversed(upstream), name])})"
        out.append(line)
    return out


def chain_depths(requires: dict[str, list[str]]) -> dict[str, int]:
    """job -> how many upstreams deep it is: at one instant, an upstream's row comes first."""
    depths: dict[str, int] = {}

    def depth(job: str, seen: tuple[str, ...] = ()) -> int:
        if job not in depths:
            ups = [u for u in requires.get(job, []) if u not in seen]
            depths[job] = 1 + max((depth(u, (*seen, job)) for u in ups), default=-1)
        return depths[job]

    for job in requires:
        depth(job)
    return depths
