"""The dead-man tells when this node's halt-watch has stopped looking (issue 44): its mirror of
the cluster's halts (ledger/haltmirror.py) says when it last looked; older than STALE_SEC, one
critical alert per outage and the heartbeat's /fail while it lasts."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from market_timers.contracts.outcomes import DEFAULT_SEVERITY
from market_timers.ledger import haltmirror
from market_timers.watch import haltwatch_fresh

from .test_cluster_deadman import AFTER_DEADLINE, nodes  # noqa: F401 (the fixture)


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    path = tmp_path / "halt-mirror"
    monkeypatch.setenv("MARKET_HALT_MIRROR_DIR", str(path))
    return path


def _looked(mirror, at) -> None:
    haltmirror.write(str(mirror), [])
    os.utime(mirror / "looked", (at.timestamp(), at.timestamp()))


def test_a_halt_watch_that_stopped_looking_is_one_critical_alert_per_outage(nodes, mirror):  # noqa: F811
    a, _ = nodes
    _looked(mirror, AFTER_DEADLINE - timedelta(seconds=haltwatch_fresh.STALE_SEC + 60))
    first = a.deadman()
    second = a.deadman(AFTER_DEADLINE + timedelta(minutes=1))
    stale = [c for c in a.alerts.calls if c["kind"] == "halt-watch-stale"]
    assert len(stale) == 1 and DEFAULT_SEVERITY["halt-watch-stale"] == "critical"
    assert "ny4-a" in stale[0]["text"] and "halt-watch" in stale[0]["text"]
    assert first.failed and second.failed
    assert any("halt-watch" in u for u in second.unhealthy)
    # it looks again: the outage is over, and the next one is told again
    _looked(mirror, AFTER_DEADLINE + timedelta(minutes=2))
    back = a.deadman(AFTER_DEADLINE + timedelta(minutes=2, seconds=30))
    assert not any("halt-watch" in u for u in back.unhealthy)
    _looked(mirror, AFTER_DEADLINE)
    a.deadman(AFTER_DEADLINE + timedelta(hours=1))
    assert [c["kind"] for c in a.alerts.calls].count("halt-watch-stale") == 2


def test_a_halt_watch_that_looks_is_not_alerted(nodes, mirror):  # noqa: F811
    a, _ = nodes
    _looked(mirror, AFTER_DEADLINE - timedelta(seconds=30))
    result = a.deadman()
    assert "halt-watch-stale" not in [c["kind"] for c in a.alerts.calls]
    assert not any("halt-watch" in u for u in result.unhealthy)
