"""Shared helpers for the unit tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def write_config(tmp_path: Path):
    """write_config(text) -> path of a config file in a tmp dir (state/unit dirs inside it)."""

    def write(text: str, name: str = "market-timers.toml") -> Path:
        body = textwrap.dedent(text)
        prefix = (f'unit_dir = "{tmp_path}/units"\nstate_dir = "{tmp_path}/state"\n'
                  f'spool_dir = "{tmp_path}/spool"\nruntime_dir = "{tmp_path}/run"\n')
        path = tmp_path / name
        path.write_text(prefix + body)
        return path

    return write


@pytest.fixture(autouse=True)
def _no_real_metrics_textfile(tmp_path_factory, monkeypatch):
    """No test writes the host's /var/lib/prometheus/node-exporter: to the metrics, only
    directories under pytest's temporary directory exist."""
    import os

    from market_timers import metrics

    base = str(tmp_path_factory.getbasetemp())
    monkeypatch.setattr(metrics, "directory_exists",
                        lambda path: path.startswith(base + "/") and os.path.isdir(path))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs mounted at tmp_path/spool (root only: skipped without, failed under CI)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("a full-disk test needs root to mount a tmpfs (CI=true)")
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "spool"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.fixture
def fill_up():
    """fill_up(path): write zeros into the file at path until its file system is full."""
    import errno
    import os

    def fill(path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 1024)
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)

    return fill


# outside CI: what was skipped, and why (tests/skipsummary.py); the parts `make test` runs side by
# side, and the time of each (tests/parallelrun.py)
pytest_plugins = ["skipsummary", "parallelrun"]
