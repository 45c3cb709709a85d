"""The cached Debian 12 root filesystem the e2e containers boot from.

Built once with debootstrap into a scratch directory next to the cache entry,
then renamed into place (atomic), so an interrupted build never leaves a
half-made rootfs behind. Each test session boots a copy, never the cache.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
INCLUDE = "systemd,systemd-sysv,dbus,python3"
# Units that would block or fail a first boot in a container.
MASKED_UNITS = ("systemd-firstboot.service",)


def cache_dir() -> Path:
    return Path(os.environ.get("MARKET_TIMERS_E2E_CACHE", "/var/cache/market-timers-e2e"))


def ensure_rootfs(cache: Path | None = None) -> Path:
    """Return the cached rootfs, building it first if it is missing."""
    cache = cache or cache_dir()
    final = cache / SUITE
    if final.is_dir():
        os.chmod(final, 0o755)  # heal a cache built before prepare_rootfs set it
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it
        if final.is_dir():
            return final
        scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}.build-", dir=cache))
        try:
            _debootstrap(scratch, cache / "debootstrap.log")
            prepare_rootfs(scratch)
            scratch.rename(final)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    return final


def _debootstrap(target: Path, log_path: Path) -> None:
    cmd = [
        "debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE, str(target), MIRROR,
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
