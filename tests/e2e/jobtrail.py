"""What became of one job's fire, for a campaign's fire that ran twice or neither ran nor was
alerted: the ledger's rows for it and the lines both nodes' journals hold about it (its units,
its runner's fields, the events and outbox services that carry its alerts). Read while the
cluster is still as the campaign left it: a node booted again after may have lost its journal."""

from __future__ import annotations

from .container import ContainerError

LEDGER = {
    "mt_runs": "node, how, attempt, claimed_at, finished_at, result, fields",
    "mt_refusals": "node, at, fields",
    "mt_misses": "node, at",
}
CARRIERS = ("market-events.service", "market-outbox.service", "market-deadman.service")


def job_trail(cluster, job: str, lines: int = 40) -> str:
    """The ledger's rows and the nodes' journal lines that name `job`, as one text."""
    out = []
    for table, columns in LEDGER.items():
        try:
            rows = cluster.psql(f"SELECT {columns} FROM {table} WHERE job = '{job}'")
        except ContainerError as e:
            rows = f"(not read: {str(e)[:200]})"
        out.append(f"{table}: {rows or '(none)'}")
    for name, box in cluster.nodes.items():
        if not box.running:
            out.append(f"{name}: not running")
            continue
        own = box.journal("-o", "short-precise", f"--unit=market-{job}@*.service") + \
            box.journal("-o", "short-precise", f"MARKET_JOB={job}")
        carried = [line for line in box.journal(
            "-o", "short-precise", *(f"--unit={u}" for u in CARRIERS)).splitlines()
            if job in line]
        tail = (own.splitlines() + carried)[-lines:]
        out.append(f"{name} journal:\n  " + "\n  ".join(tail or ["(nothing)"]))
    return "\n".join(out)
