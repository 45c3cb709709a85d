"""How a problem names a [[job]] table: `job.<name>` (e.g. `job.signal.offset`), so that an
operator finds it by the name they wrote; `job[<index>]` (from 0) only for a table whose name is
missing, not a job name, or shared with another table (the index is then the one way to tell)."""

from __future__ import annotations

from market_timers.config.jobchecks import JOB_NAME


def job_paths(tables: list) -> list[str]:
    """The path of each table of `[[job]]`, in its order."""
    names = [t.get("name") if isinstance(t, dict) else None for t in tables]
    return [f"job.{n}" if isinstance(n, str) and JOB_NAME.match(n) and names.count(n) == 1
            else f"job[{i}]" for i, n in enumerate(names)]


def paths_by_name(tables: list) -> dict[str, str]:
    """name -> path, for the checks that walk the parsed jobs (each has a valid name)."""
    return {t["name"]: p for t, p in zip(tables, job_paths(tables), strict=True)
            if isinstance(t, dict) and isinstance(t.get("name"), str)}


def path_of(tables: list, name: str) -> str:
    """The path of the job `name`; `job.<name>` when the tables are not at hand."""
    return paths_by_name(tables).get(name, f"job.{name}")
