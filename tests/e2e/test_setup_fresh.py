"""The README's set-up as a newcomer meets it (issue 27, 1): a fresh Debian system (the e2e rootfs,
minbase plus systemd and python3, in a throw-away overlay) gets only the packages the README's
first set-up line names, then `make demo` runs on a copy of the source and shows the calendar at
work, the units rendered and verified, and the next steps.

pip inside reaches the package index the way this machine does (its proxy settings and CA
bundle, as scripts/build-deb passes them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import require_e2e
from .debpkg import REPO
from .rootfs import ensure_rootfs, nspawn

pytestmark = pytest.mark.e2e

PASSED_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def readme_packages() -> list[str]:
    """The packages of the README's `apt install ...` in its set-up paragraph."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Set-up: two commands", 1)[1].split("```sh", 1)[0]
    found = re.search(r"`apt install ([a-z0-9.+\- ]+)`", section.replace("\n", " "))
    assert found, "README's set-up names no `apt install ...` line"
    return found.group(1).split()


def test_make_demo_on_a_fresh_system_with_only_the_readmes_packages(release, tmp_path):
    require_e2e()
    root = ensure_rootfs(suite=release.suite)
    src = tmp_path / "market-timers"  # what a clone holds: every tracked file
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        if path.is_file() and not path.is_symlink():
            target = src / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    packages = readme_packages()
    assert {"make", "python3-venv", "gcc", "libc6-dev", "systemd"} <= set(packages)
    options = [f"--bind={src}:/src", "--volatile=overlay", "--chdir=/src"]
    options += [f"--setenv={k}={os.environ[k]}" for k in PASSED_ENV if os.environ.get(k)]
    if CA_BUNDLE.is_file():
        options += [f"--bind-ro={CA_BUNDLE}:/run/host-ca-certificates.crt",
                    "--setenv=PIP_CERT=/run/host-ca-certificates.crt"]
    script = ("apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "
              f"{' '.join(packages)} >/dev/null && make demo")
    done = nspawn(root, release.suite, ["/bin/sh", "-ec", script], *options,
                  capture_output=True, text=True, timeout=1500)
    print(done.stdout[-4000:])
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    out = done.stdout
    # The calendar at work: the DST change, Thanksgiving closed, the 13:00 early close.
    assert "signal  XNYS      2026-10-30  close -15min  Fri 2026-10-30 19:45:00  Fri 15:45:00 EDT" \
        in out
    assert "Mon 2026-11-02 20:45:00  Mon 15:45:00 EST" in out
    fires = [line for line in out.splitlines() if line.startswith("signal ")]
    assert len(fires) == 8 and not any("2026-11-26" in line for line in fires), fires
    assert "Fri 2026-11-27 17:45:00  Fri 12:45:00 EST" in out
    assert re.search(r"wrote build/units: \d+ new", out) and "build/units: all units verified" \
        in out
    assert "== next:" in out
