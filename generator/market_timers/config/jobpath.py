"""How a problem names a [[job]] table: `job.<name>` (e.g. `job.signal.offset`), so that an
operator finds it by the name they wrote; `job[<index>]` (from 0) only for a table whose name is
missing, not a job name, or shared with another table (the index is then the one way to tell).
And where it is: `job_lines` finds the line of a job's key in the file's text (tomllib keeps no
positions), for `FILE:LINE:` in front of the problem.
"""

from __future__ import annotations

import re
from collections import Counter

from market_timers.config.jobchecks import JOB_NAME


def job_paths(tables: list) -> list[str]:
    """The path of each table of `[[job]]`, in its order."""
    names = [t.get("name") if isinstance(t, dict) else None for t in tables]
    counts = Counter(n for n in names if isinstance(n, str))  # not names.count: N² at 1,000 jobs
    return [f"job.{n}" if isinstance(n, str) and JOB_NAME.match(n) and counts[n] == 1
            else f"job[{i}]" for i, n in enumerate(names)]


def paths_by_name(tables: list) -> dict[str, str]:
    """name -> path, for the checks that walk the parsed jobs (each has a valid name)."""
    return {t["name"]: p for t, p in zip(tables, job_paths(tables), strict=True)
            if isinstance(t, dict) and isinstance(t.get("name"), str)}


def path_of(tables: list, name: str) -> str:
    """The path of the job `name`; `job.<name>` when the tables are not at hand."""
    return paths_by_name(tables).get(name, f"job.{name}")


_HEADER = re.compile(r"\s*\[\[\s*job\s*\]\]\s*(#.*)?\Z")
_SUBTABLE = re.compile(r"\s*\[\s*job\s*\.\s*([A-Za-z0-9_-]+)\s*\]\s*(#.*)?\Z")
_OTHER_TABLE = re.compile(r"\s*\[")
_KEY = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")
_PATH = re.compile(r"(job\.[a-z][a-z0-9_-]*|job\[[0-9]+\])(?:\.([A-Za-z0-9_-]+))?")


def job_lines(text: str, tables: object):
    """`locate(path)` -> the line (from 1) of the job key a problem's path names, else of its
    [[job]] header; None when the path is no job's or the file's tables cannot be matched to
    the headers (an inline `job = [...]`). The first line of a key in the job's block."""
    blocks: list[dict[str, int]] = []
    current: dict[str, int] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if _HEADER.match(line):
            current = {"": number}
            blocks.append(current)
        elif (sub := _SUBTABLE.match(line)) and current is not None:
            current.setdefault(sub.group(1), number)
        elif _OTHER_TABLE.match(line):
            current = None
        elif current is not None and (key := _KEY.match(line)):
            current.setdefault(key.group(1), number)
    if not isinstance(tables, list) or len(blocks) != len(tables):
        return lambda path: None
    where = dict(zip(job_paths(tables), blocks, strict=True))

    def locate(path: str) -> int | None:
        found = _PATH.match(path)
        block = where.get(found.group(1)) if found else None
        if block is None:
            return None
        return block.get(found.group(2) or "", block[""])
    return locate
