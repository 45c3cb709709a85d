"""The harness's allowance for a slow sync (scenario.sync_allowance): no container needed."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from . import container, scenario


def test_the_first_sync_after_any_boot_is_allowed_a_cold_start(monkeypatch):
    monkeypatch.setattr(scenario, "_RECENT_SYNCS", [0.8, 0.9])
    monkeypatch.setattr(container, "boots", 3)
    monkeypatch.setattr(scenario, "_SYNCED_AFTER_BOOTS", [3])
    assert scenario.sync_allowance() == 0.0  # warm: syncs of a second or less
    monkeypatch.setattr(container, "boots", 4)  # a test rebooted the container since
    assert scenario.sync_allowance() == 1.5 * scenario.FIRST_SYNC - scenario.NOMINAL_SYNC



class _SlowSyncBox:
    """A container whose first `market-timers sync` outlasts the tests' lead."""

    def __init__(self, slow: float):
        self.slow, self.syncs, self.stopped, self.jobs = slow, 0, [], []

    def write_file(self, path, text, mode=None):
        pass

    def run(self, argv, check=True, timeout=None):
        if argv[:2] == ["market-timers", "sync"]:
            self.syncs += 1
            time.sleep(self.slow if self.syncs == 1 else 0)
        elif argv[:2] == ["systemctl", "stop"]:
            self.stopped.append(argv[2:])
        return SimpleNamespace(returncode=0,
                               stdout="".join(f"start {j.timer}\n" for j in self.jobs))


def test_a_sync_that_outlasts_the_lead_moves_every_job_out_and_syncs_again(monkeypatch):
    box = _SlowSyncBox(slow=2.5)
    scene = scenario.Scenario.__new__(scenario.Scenario)
    scene.box, scene.sync_options = box, []
    monkeypatch.setattr(scene, "config_text", lambda *a, **k: "", raising=False)
    monkeypatch.setattr(scene, "run_record", lambda job: None, raising=False)
    first = datetime.fromtimestamp(math.ceil(time.time()) + 1, UTC)
    box.jobs = jobs = [scenario.Job("a", first, ["ok"]),
                       scenario.Job("b", first + timedelta(seconds=1), ["ok"])]
    old_timers = [j.timer for j in jobs]
    scene.schedule(jobs)
    assert box.syncs == 2 and box.stopped == [old_timers]
    assert jobs[1].instant - jobs[0].instant == timedelta(seconds=1)  # their spacing kept
    assert jobs[0].instant.timestamp() > time.time() + scenario.MIN_LEAD
    assert scenario.allowance_for(jobs[0].instant) >= (jobs[0].instant - first).total_seconds()


def test_a_cluster_node_never_moves_its_jobs(monkeypatch):
    box = _SlowSyncBox(slow=2.5)
    scene = scenario.Scenario.__new__(scenario.Scenario)
    scene.box, scene.sync_options = box, []
    monkeypatch.setattr(scene, "config_text", lambda *a, **k: "", raising=False)
    first = datetime.fromtimestamp(math.ceil(time.time()) + 1, UTC)
    box.jobs = jobs = [scenario.Job("a", first, ["ok"])]
    with pytest.raises(AssertionError, match="sync finished after a's instant"):
        scene.schedule(jobs, move_out=False)
    assert box.syncs == 1 and jobs[0].instant == first
