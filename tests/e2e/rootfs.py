"""The cached Debian root filesystems: one per release to boot the e2e containers from, one per
release to build the .deb in (the boot rootfs plus the build tools).

Each is built once into a scratch directory next to its cache entry, then renamed into place
(atomic), so an interrupted build never leaves a half-made rootfs behind; a lock file makes
concurrent sessions build it once. Test sessions boot a copy, never the cache; package builds
run on a throw-away overlay of the build rootfs.

Also a command line for scripts/build-deb (`python3 -m tests.e2e.rootfs COMMAND SUITE`):
`build-root` prints the build rootfs of SUITE (building it first if missing), `nspawn-env` the
environment systemd-nspawn needs for it (one VAR=value a line), `tag` its version suffix (deb12).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


def debian_mirror(sources=APT_SOURCES) -> str:
    """The Debian archive this machine's apt uses (its first `deb` URI whose path ends in
    /debian, in one-line or deb822 form): debootstrap takes the same mirror, proxy and all.
    $MARKET_TIMERS_E2E_MIRROR overrides it."""
    if os.environ.get("MARKET_TIMERS_E2E_MIRROR"):
        return os.environ["MARKET_TIMERS_E2E_MIRROR"]
    files: list[Path] = []
    for path in sources:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".list", ".sources"))
        elif path.is_file():
            files.append(path)
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if path.suffix == ".sources" and words[:1] == ["URIs:"]:
                uris = words[1:]
            elif path.suffix == ".list" and words[:1] == ["deb"]:
                uris = [w for w in words[1:] if "://" in w][:1]
            else:
                continue
            for uri in uris:
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    raise RuntimeError("no Debian archive in this machine's apt sources (/etc/apt/sources.list"
                       "[.d]): set MARKET_TIMERS_E2E_MIRROR to a Debian mirror's URL")


INCLUDE = "systemd,systemd-sysv,dbus,python3"
# Units that would block or fail a first boot in a container.
MASKED_UNITS = ("systemd-firstboot.service",)
# What building the .deb and checking it needs inside the build rootfs (debian/control's
# Build-Depends, dpkg-buildpackage and lintian). The list is part of the cache entry's name:
# changing it builds a new build rootfs.
BUILD_PACKAGES = (
    "build-essential", "debhelper", "dh-virtualenv", "dpkg-dev", "fakeroot", "lintian",
    "python3-dev", "python3-venv", "ca-certificates",
)


@dataclass(frozen=True)
class Release:
    """A Debian release the package is built for and tested on."""

    suite: str  # debootstrap's and sources.list's name: bookworm
    number: int  # 12
    # systemd-nspawn's environment for this release. Debian 13's systemd 257 boots under the
    # host's nspawn (252, cgroup v1/hybrid host) only on the unified hierarchy.
    nspawn_env: dict[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        """The version suffix of the package built for it: deb12 (0.1.0~deb12)."""
        return f"deb{self.number}"

    @property
    def short(self) -> str:
        """Test id: d12."""
        return f"d{self.number}"


RELEASES = {
    "bookworm": Release("bookworm", 12),
    "trixie": Release("trixie", 13, {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}),
}
SUITES = tuple(RELEASES)
SUITE = "bookworm"  # the default, for callers that name no release


def release(suite: str) -> Release:
    try:
        return RELEASES[suite]
    except KeyError:
        raise ValueError(f"unknown Debian release {suite!r}: use one of {', '.join(SUITES)}") \
            from None


def host_suite() -> str:
    """The codename of the Debian release this machine runs (VERSION_CODENAME of os-release)."""
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip().strip('"')
    raise RuntimeError("/etc/os-release names no VERSION_CODENAME")


def cache_dir() -> Path:
    return Path(os.environ.get("MARKET_TIMERS_E2E_CACHE", "/var/cache/market-timers-e2e"))


def _lock_name(name: str) -> str:
    # Debian 12's rootfs keeps the lock file older sessions use, so they build it once together.
    return ".lock" if name == "bookworm" else f".lock-{name}"


def _build_once(cache: Path, name: str, make) -> Path:
    """cache/name, made by make(scratch_dir) under the entry's lock if it is missing."""
    final = cache / name
    if final.is_dir():
        os.chmod(final, 0o755)  # heal a cache built before prepare_rootfs set it
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / _lock_name(name), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it
        if final.is_dir():
            return final
        scratch = Path(tempfile.mkdtemp(prefix=f"{name}.build-", dir=cache))
        try:
            make(scratch)
            os.chmod(scratch, 0o755)
            scratch.rename(final)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    return final


def ensure_rootfs(cache: Path | None = None, suite: str = SUITE) -> Path:
    """Return the cached bootable rootfs of suite, building it first if it is missing."""
    cache = cache or cache_dir()
    release(suite)
    log = cache / ("debootstrap.log" if suite == "bookworm" else f"debootstrap-{suite}.log")

    def make(scratch: Path) -> None:
        _debootstrap(suite, scratch, log)
        prepare_rootfs(scratch)

    return _build_once(cache, suite, make)


def build_root_name(suite: str) -> str:
    digest = hashlib.sha256(" ".join(BUILD_PACKAGES).encode()).hexdigest()[:8]
    return f"build-{suite}-{digest}"


def ensure_build_rootfs(cache: Path | None = None, suite: str = SUITE) -> Path:
    """Return the cached build rootfs of suite (its boot rootfs plus BUILD_PACKAGES)."""
    return _with_packages(cache or cache_dir(), suite, build_root_name(suite), BUILD_PACKAGES,
                          "build")


# The database container of the cluster tests (tests/e2e/cluster.py): the boot rootfs plus
# Debian's postgresql, no cluster made (each test session makes its own on its own port). Built
# once per machine like the others, not installed from the archive at every session; the list is
# part of the entry's name.
PG_PACKAGES = ("postgresql",)
PG_CREATECLUSTER = ("etc/postgresql-common/createcluster.conf", "create_main_cluster = false\n")


def ensure_pg_rootfs(cache: Path | None = None, suite: str = SUITE) -> Path:
    """Return the cached PostgreSQL rootfs of suite (its boot rootfs plus PG_PACKAGES)."""
    digest = hashlib.sha256(" ".join(PG_PACKAGES).encode()).hexdigest()[:8]
    return _with_packages(cache or cache_dir(), suite, f"pg-{suite}-{digest}", PG_PACKAGES,
                          "PostgreSQL", PG_CREATECLUSTER)


def _with_packages(cache: Path, suite: str, name: str, packages: tuple[str, ...], what: str,
                   conf: tuple[str, str] | None = None) -> Path:
    """cache/name: a copy of suite's boot rootfs with packages installed (and the file
    conf = (path, text) written before, for their postinst to read), built once."""
    base = ensure_rootfs(cache, suite)

    def make(scratch: Path) -> None:
        scratch.rmdir()
        subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(scratch)], check=True)
        if conf is not None:
            (scratch / conf[0]).parent.mkdir(parents=True, exist_ok=True)
            (scratch / conf[0]).write_text(conf[1])
        log_path = cache / f"{name}.log"
        with open(log_path, "w") as log:
            for cmd in (["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
                        ["apt-get", "clean"]):
                result = nspawn(scratch, suite, cmd, stdout=log, stderr=subprocess.STDOUT)
                if result.returncode != 0:
                    tail = log_path.read_text(errors="replace").splitlines()[-20:]
                    raise RuntimeError(
                        f"{' '.join(cmd)} failed in the {suite} {what} rootfs (exit "
                        f"{result.returncode}); last lines of {log_path}:\n" + "\n".join(tail))

    return _build_once(cache, name, make)


def nspawn_env(suite: str) -> dict[str, str]:
    return dict(os.environ, **release(suite).nspawn_env)


def nspawn(root: Path, suite: str, cmd: list[str], *options: str,
           **run_kwargs) -> subprocess.CompletedProcess:
    """Run cmd in root with systemd-nspawn (no boot, the host's network)."""
    # A name of its own: nspawn keeps per-machine state under /run/systemd/nspawn, and other
    # sessions may run in the same rootfs at the same time.
    name = f"mt-{suite}-{os.getpid()}-{secrets.token_hex(3)}"
    argv = ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "--pipe",
            f"--machine={name}", "-D", str(root), "--setenv=DEBIAN_FRONTEND=noninteractive", "--setenv=LANG=C.UTF-8",
            *options, "--", *cmd]
    run_kwargs.setdefault("check", False)
    return subprocess.run(argv, env=nspawn_env(suite), **run_kwargs)


def _debootstrap(suite: str, target: Path, log_path: Path) -> None:
    cmd = [
        "debootstrap", "--variant=minbase", f"--include={INCLUDE}", suite, str(target),
        debian_mirror(),
    ]
    with open(log_path, "w") as log:
        result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(
            f"debootstrap failed (exit {result.returncode}); last lines of {log_path}:\n"
            + "\n".join(tail)
        )


def prepare_rootfs(root: Path) -> None:
    """Make a debootstrapped tree boot unattended under systemd-nspawn."""
    # The build dir comes from mkdtemp (0700): as the container's "/", it would keep every
    # non-root user out (dbus-daemon as messagebus cannot even read its config: no boot).
    os.chmod(root, 0o755)
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / "etc/machine-id").write_text(secrets.token_hex(16) + "\n")
    (root / "etc/hostname").write_text("market-timers-e2e\n")
    # Fail fast instead of hanging on a prompt inside the container.
    (root / "etc/apt/apt.conf.d/90market-timers-e2e").write_text(
        'APT::Install-Recommends "false";\nDpkg::Options { "--force-confdef"; "--force-confold"; };\n'
    )


def copy_rootfs(source: Path, parent: Path) -> Path:
    """Copy the cached rootfs into a fresh directory under parent (reflink if possible)."""
    parent.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(prefix="run-", dir=parent)) / "root"
    subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(target)], check=True)
    return target


def main(argv: list[str]) -> int:
    usage = "usage: python3 -m tests.e2e.rootfs {build-root|nspawn-env|tag} SUITE"
    if len(argv) != 2 or argv[0] not in ("build-root", "nspawn-env", "tag"):
        print(usage, file=sys.stderr)
        return 2
    command, suite = argv
    try:
        release(suite)
    except ValueError as exc:
        print(f"rootfs: {exc}", file=sys.stderr)
        return 2
    if command == "tag":
        print(release(suite).tag)
        return 0
    if command == "nspawn-env":
        for key, value in release(suite).nspawn_env.items():
            print(f"{key}={value}")
        return 0
    print(ensure_build_rootfs(suite=suite))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
