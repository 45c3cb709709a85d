"""One booted Debian 12 container (systemd 252) with the package installed, for the container
benchmarks: a fresh copy of the cached e2e rootfs, booted with systemd-nspawn, as tests/e2e does
(the e2e tests also run on Debian 13; the benchmarks' figures are Debian 12's).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from bench.common import defer_removal, ensure_repo_on_path

ensure_repo_on_path()

from tests.e2e.container import Container, fresh_container, missing_prerequisite  # noqa: E402
from tests.e2e.debpkg import ensure_deb  # noqa: E402

CONFIG = "/etc/market-timers/market-timers.toml"
UNIT_DIR = "/etc/systemd/system"


def log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


@contextlib.contextmanager
def shared_box() -> Iterator[Container]:
    reason = missing_prerequisite()
    if reason:
        raise RuntimeError(f"container benchmarks: {reason}")
    start = time.monotonic()
    deb = ensure_deb("bookworm")
    log(f"deb ready: {deb.name} ({time.monotonic() - start:.0f} s)")
    keep = os.environ.get("MARKET_TIMERS_BENCH_KEEP") == "1"
    # Powered off on exit, but its copy of the rootfs (~10,000 files) is removed at the end of
    # the run (bench.common.defer_removal): the host benchmarks that follow time file creates.
    with fresh_container("mt-bench", keep=keep, suite="bookworm", remove=defer_removal) as box:
        log(f"booted in {box.boot_seconds:.1f} s ({box.root})")
        box.apt_install(box.copy_in(deb))
        log("package installed")
        yield box


def clear_market_units(box: Container) -> None:
    """Stop and delete every generated job unit, then reload so systemd forgets them."""
    box.run("systemctl stop 'market-*@*.timer' 'market-*@*.service' >/dev/null 2>&1; "
            f"rm -f {UNIT_DIR}/market-*@* {UNIT_DIR}/timers.target.wants/market-*@* "
            "/var/lib/systemd/timers/stamp-market-*@*; systemctl daemon-reload; "
            "systemctl reset-failed 'market-*' >/dev/null 2>&1; true", timeout=300)


def now_inside(box: Container) -> float:
    return float(box.run(["date", "+%s.%N"]).stdout)


def loaded_units(box: Container) -> int:
    return int(box.run(["systemctl", "show", "--value", "-p", "NNames"]).stdout.strip())
