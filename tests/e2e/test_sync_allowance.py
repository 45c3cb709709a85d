"""The harness's allowance for a slow sync (scenario.sync_allowance): no container needed."""

from __future__ import annotations

from . import container, scenario


def test_the_first_sync_after_any_boot_is_allowed_a_cold_start(monkeypatch):
    monkeypatch.setattr(scenario, "_RECENT_SYNCS", [0.8, 0.9])
    monkeypatch.setattr(container, "boots", 3)
    monkeypatch.setattr(scenario, "_SYNCED_AFTER_BOOTS", [3])
    assert scenario.sync_allowance() == 0.0  # warm: syncs of a second or less
    monkeypatch.setattr(container, "boots", 4)  # a test rebooted the container since
    assert scenario.sync_allowance() == 1.5 * scenario.FIRST_SYNC - scenario.NOMINAL_SYNC
