"""`systemd-analyze security` of the package's services inside Debian 12 (issue 5, case 10)."""

from __future__ import annotations

import re

import pytest

from .container import Container

pytestmark = pytest.mark.e2e

INSTANCE = "market-tick@2026-11-30-074449.service"  # %i: a job unit's name
SERVICES = (
    f"market-alert-failure@{INSTANCE}.service",
    f"market-alert-success@{INSTANCE}.service",
    "market-alert-ends.service",
    "market-deadman.service",
    "market-refresh.service",
    "market-outbox.service",
    "market-events.service",
    "market-halt-watch.service",
)


def test_every_packaged_service_scores_2_0_or_lower(container: Container) -> None:
    scores = {}
    for unit in SERVICES:
        out = container.run(["systemd-analyze", "security", "--no-pager", unit]).stdout
        found = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\S+)", out)
        assert found, f"no exposure level for {unit}:\n{out[-2000:]}"
        scores[unit] = (float(found[1]), found[2])
    for unit, (score, label) in scores.items():
        print(f"[e2e] systemd-analyze security {unit}: {score} {label}")
    assert {u: s for u, (s, _) in scores.items() if s > 2.0} == {}
    assert {label for _, label in scores.values()} == {"OK"}
