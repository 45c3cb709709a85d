"""Build the market-timers .deb for the e2e session, or reuse a fresh one."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# Never part of the package: editing a test or a benchmark does not make the .deb stale.
NOT_PACKAGED = ("tests/", "bench/", ".ci/")


def _source_files(repo: Path) -> list[Path]:
    """Files that go into the package: tracked plus untracked-but-not-ignored (as build-deb)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout
    return [repo / name for name in out.split("\0") if name and not name.startswith(NOT_PACKAGED)]


def built_deb(repo: Path = REPO) -> Path | None:
    debs = sorted((repo / "dist").glob("market-timers_*.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


def is_fresh(deb: Path, repo: Path = REPO) -> bool:
    """True if deb is newer than every source file (deleted files are ignored)."""
    built = deb.stat().st_mtime
    return all(f.stat().st_mtime < built for f in _source_files(repo) if f.exists())


def ensure_deb(repo: Path = REPO) -> Path:
    """Return dist/market-timers_*.deb, running `make deb` first if it is stale or missing."""
    (repo / "dist").mkdir(exist_ok=True)
    with open(repo / "dist" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test sessions build it once
        return _ensure_deb_locked(repo)


def _ensure_deb_locked(repo: Path) -> Path:
    deb = built_deb(repo)
    if deb is not None and is_fresh(deb, repo):
        return deb
    env = dict(os.environ, LINTIAN="0")  # lintian has its own test
    result = subprocess.run(["make", "deb"], cwd=repo, env=env, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"make deb failed (exit {result.returncode}):\n{result.stdout[-4000:]}\n"
            f"{result.stderr[-4000:]}"
        )
    deb = built_deb(repo)
    if deb is None:
        raise RuntimeError("make deb succeeded but left no dist/market-timers_*.deb")
    return deb
