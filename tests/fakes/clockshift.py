"""Build tests/fakes/clockshift.c, the LD_PRELOAD shim that shifts CLOCK_REALTIME (its own
comment says how), into a shared object: for the cluster tests on the host and the e2e nodes."""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "clockshift.c"


def build(out: Path) -> Path:
    """The shim compiled to `out` (with the host's cc: Debian 12's glibc, the oldest under test)."""
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE)], check=True)
    return out
