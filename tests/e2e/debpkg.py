"""Build the market-timers .deb of a Debian release for the e2e session (`make deb DIST=...`, in
a container of that release), or reuse a fresh one; and the flat apt repository holding it."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

from .rootfs import SUITE

REPO = Path(__file__).resolve().parents[2]


# Never part of the package: editing a test, a benchmark or the docs does not make the .deb stale.
NOT_PACKAGED = ("tests/", "bench/", ".ci/", "README.md", "HACKING.md", "docs/", "Makefile",
                "scripts/make-repo")


def _source_files(repo: Path) -> list[Path]:
    """Files that go into the package: tracked plus untracked-but-not-ignored (as build-deb)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout
    return [repo / name for name in out.split("\0") if name and not name.startswith(NOT_PACKAGED)]


def built_deb(repo: Path = REPO, suite: str = SUITE) -> Path | None:
    debs = sorted((repo / "dist" / suite).glob("market-timers_*.deb"),
                  key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


def sources_digest(repo: Path = REPO) -> str:
    """SHA-256 over the package's source files, names and contents (deleted files left out)."""
    digest = hashlib.sha256()
    for f in sorted(_source_files(repo)):
        if f.is_file():
            digest.update(f"{f.relative_to(repo)}\0{f.stat().st_size}\0".encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()


def _digest_file(deb: Path) -> Path:
    return deb.parent / ".sources-sha256"


def is_fresh(deb: Path, repo: Path = REPO) -> bool:
    """True if deb was built from the sources as they are now: the digest taken before its
    build is today's. (Not modification times: a file edited while the build ran is older than
    the .deb, yet the .deb may not hold the edit.)"""
    try:
        built_from = _digest_file(deb).read_text().split()
    except FileNotFoundError:
        return False
    return built_from == [sources_digest(repo), deb.name]


def ensure_deb(suite: str = SUITE, repo: Path = REPO) -> Path:
    """Return dist/<suite>/market-timers_*.deb, running `make deb DIST=<suite>` first if it is
    stale or missing."""
    (repo / "dist").mkdir(exist_ok=True)
    with open(repo / "dist" / f".build-{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test sessions build it once
        return _ensure_deb_locked(repo, suite)


def _ensure_deb_locked(repo: Path, suite: str) -> Path:
    deb = built_deb(repo, suite)
    if deb is not None and is_fresh(deb, repo):
        return deb
    digest = sources_digest(repo)  # before the build: an edit during it makes the .deb stale
    env = dict(os.environ, LINTIAN="0")  # lintian has its own test
    result = subprocess.run(["make", "deb", f"DIST={suite}"], cwd=repo, env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"make deb DIST={suite} failed (exit {result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    deb = built_deb(repo, suite)
    if deb is None:
        raise RuntimeError(f"make deb succeeded but left no dist/{suite}/market-timers_*.deb")
    _digest_file(deb).write_text(f"{digest} {deb.name}\n")
    return deb


# The last commit of 0.1.0 (before the jobs got their own user): the upgrade test installs it.
RELEASE_0_1 = "7580deb70364c2a4c740ef094485a34427ea72ab"


def released_deb(commit: str, suite: str = SUITE, repo: Path = REPO) -> Path:
    """The .deb of an earlier commit (a release users have installed), for the upgrade tests:
    built once per machine from a detached worktree of that commit and kept in the e2e cache,
    under the commit's name (what it is built from)."""
    from .rootfs import cache_dir

    keep = cache_dir() / "released" / f"{commit[:12]}-{suite}"
    keep.mkdir(parents=True, exist_ok=True)
    with open(keep / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(keep.glob("market-timers_*.deb"))
        if found:
            return found[-1]
        tree = keep / "tree"
        _worktree(repo, "remove", "--force", str(tree), check=False)
        _worktree(repo, "add", "--detach", str(tree), commit)
        try:
            deb = _ensure_deb_locked(tree, suite)
            target = keep / deb.name
            target.write_bytes(deb.read_bytes())
        finally:
            _worktree(repo, "remove", "--force", str(tree), check=False)
        return target


def _worktree(repo: Path, *args: str, check: bool = True) -> None:
    """`git worktree ARGS`, one at a time per machine: each release's e2e worker may add and
    remove a worktree of the same checkout at the same moment."""
    from .rootfs import cache_dir

    with open(cache_dir() / "released" / ".git-worktree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(["git", "worktree", *args], cwd=repo, capture_output=True, text=True,
                       check=check)


def prebuild_released(suite: str, commit: str = RELEASE_0_1) -> threading.Thread:
    """released_deb() in a thread, started as soon as the session's own .deb is built: on a
    fresh machine the old release's build overlaps the tests before the upgrade test (which
    waits on its lock). A failure here is left to the upgrade test's own call to report."""
    def build() -> None:
        try:
            released_deb(commit, suite)
        except Exception as exc:  # the upgrade test builds again and fails with the reason
            print(f"[e2e] building the {commit[:12]} .deb for {suite} beforehand failed: {exc}")

    thread = threading.Thread(target=build, name=f"released-deb-{suite}", daemon=True)
    thread.start()
    return thread


def make_repo(out: Path, debs: dict[str, Path], repo: Path = REPO) -> Path:
    """scripts/make-repo: a flat apt repository in out with one index per release."""
    result = subprocess.run(
        [str(repo / "scripts/make-repo"), str(out), *(f"{s}={d}" for s, d in debs.items())],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"scripts/make-repo failed (exit {result.returncode}):\n"
                           f"{result.stdout}\n{result.stderr}")
    return out


def main(argv: list[str]) -> int:
    """`python3 -m tests.e2e.debpkg SUITE...`: each suite's .deb, built only if stale or missing
    (for `make repo`); prints SUITE=PATH lines."""
    if not argv:
        print("usage: python3 -m tests.e2e.debpkg SUITE...", file=sys.stderr)
        return 2
    for suite in argv:
        print(f"{suite}={ensure_deb(suite).relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
