"""The container survives a poweroff and boots again with the package in place."""

from __future__ import annotations

import pytest

from .conftest import is_installed
from .container import Container

pytestmark = pytest.mark.e2e


def test_poweroff_then_boot_again_keeps_package_and_restarts_its_timers(
    container: Container, repo_timers: list[str]
) -> None:
    boot_id = container.read_file("/proc/sys/kernel/random/boot_id")
    container.poweroff()
    assert not container.running
    seconds = container.boot()
    print(f"[e2e] second boot: {seconds:.1f}s")
    assert container.read_file("/proc/sys/kernel/random/boot_id") != boot_id
    assert is_installed(container)
    for timer in repo_timers:
        assert container.show(timer, "ActiveState") == "active", timer
