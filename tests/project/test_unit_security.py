"""Every service the package ships scores 2.0 or lower ("OK") in systemd-analyze security (but
for the root one named in LIMITS, and why).

The score each unit reaches is written in a comment in the unit itself, so a change to its
sandboxing that moves the score shows up here and in review. The e2e suite checks the same on
the booted Debian 12 (tests/e2e/test_security.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "units"
SERVICES = sorted(p.name for p in UNITS.glob("*.service"))


# market-controls.service runs the operators' halts as root would (issue 41): it switches to the
# package's user for the alert, chowns, overrides the state directory's permissions, makes
# controls/ setgid (no RestrictSUIDSGID=) and has the network (the channels, the cluster ledger).
LIMITS = {"market-controls.service": 2.5}


def test_the_package_ships_its_nine_services():
    assert SERVICES == ["market-alert-ends.service",
                        "market-alert-failure@.service", "market-alert-success@.service",
                        "market-controls.service", "market-deadman.service",
                        "market-events.service", "market-halt-watch.service",
                        "market-outbox.service", "market-refresh.service"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
@pytest.mark.parametrize("name", SERVICES)
def test_sandbox_exposure_is_at_most_2_0_and_matches_the_comment(name):
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(UNITS / name)],
                         capture_output=True, text=True).stdout
    score = float(re.search(r"Overall exposure level for \S+: (\d+\.\d)", out).group(1))
    assert score <= LIMITS.get(name, 2.0)
    assert f"--offline=yes units/{name}: {score}" in (UNITS / name).read_text()
