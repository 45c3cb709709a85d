"""Shared helpers: percentiles, the machine's description, markdown tables, a section of RESULTS."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
PY = str(VENV_BIN / "python")


def ensure_repo_on_path() -> None:
    """So `python bench/x.py` can import bench.* and tests.* from the repo root."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": statistics.median(values), "p90": percentile(values, 90),
            "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values), "min": min(values)}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "commit": commit(),
        "fs": file_system(tempfile.gettempdir()),
    }


def file_system(path: str) -> str:
    """The file system the benchmarks write their files on, e.g. "ext4 (/dev/vda, no journal)":
    on an ext4 without a journal each new inode is checked against the ones deleted in the last
    minutes (ext4's recently_deleted()), so a burst of creates right after a mass delete costs
    several times more system time (measured in this project: 20,000 creates 1.0 s, 5.4 s just
    after 50,000 deletes). Hence defer_removal()."""
    try:
        source, fstype = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", path],
                                        capture_output=True, text=True,
                                        check=True).stdout.split()[:2]
    except (OSError, subprocess.CalledProcessError, ValueError):
        return "unknown"
    if fstype != "ext4":
        return f"{fstype} ({source})"
    try:
        task = Path(f"/sys/fs/ext4/{Path(source).name}/journal_task").read_text().strip()
    except OSError:
        return f"ext4 ({source})"
    return f"ext4 ({source}, {'no journal' if task == '<none>' else 'journal'})"


_DEFERRED: list[Path] = []


def defer_removal(path: str | os.PathLike) -> None:
    """Remove `path` (a tree the benchmarks wrote) at the end of the run, not now: a mass delete
    slows the file creates of the next minutes on some file systems (file_system()), and those
    creates are what the next benchmarks time. bench/run.py and main_standalone() call
    remove_deferred() last, also after a failure or an interrupt."""
    _DEFERRED.append(Path(path))


def remove_deferred() -> None:
    while _DEFERRED:
        shutil.rmtree(_DEFERRED.pop(), ignore_errors=True)


def scratch_dir(prefix: str) -> Path:
    """A new temporary directory, removed by remove_deferred()."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    defer_removal(path)
    return path


def commit() -> str:
    """The commit measured (with "+changes" when the tree differs from it)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" +changes" if dirty else "")


def table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.1f}" if abs(v) >= 100 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
        return str(v)

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


@dataclass
class Check:
    what: str
    ok: bool | None  # None: not measured
    detail: str

    def line(self) -> str:
        mark = {True: "PASS", False: "MISS", None: "NOT MEASURED"}[self.ok]
        return f"- **{mark}** {self.what}: {self.detail}"


@dataclass
class Section:
    name: str
    title: str
    body: list[str] = field(default_factory=list)  # markdown blocks (tables, notes)
    commands: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, text: str) -> None:
        self.body.append(text)

    def markdown(self) -> str:
        out = [f"## {self.title}", ""]
        if self.checks:
            out += [c.line() for c in self.checks] + [""]
        for block in self.body:
            out += [block, ""]
        if self.commands:
            out += ["Commands that produced these figures:", "", "```sh"]
            out += self.commands + ["```", ""]
        out.append(f"_(this benchmark took {self.seconds:.0f} s)_")
        return "\n".join(out) + "\n"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **kw)


def main_standalone(run, needs_container: bool) -> None:
    """`python -m bench.NAME`: run one benchmark and print its section (RESULTS.md untouched)."""
    ensure_repo_on_path()
    from bench.box import shared_box

    start = time.monotonic()
    try:
        if needs_container:
            with shared_box() as box:
                section = run(box)
        else:
            section = run(None)
    finally:
        remove_deferred()
    section.seconds = time.monotonic() - start
    print(section.markdown())
