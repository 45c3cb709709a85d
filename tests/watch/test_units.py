"""The static deadman / refresh units: timings, credentials, and their sandboxing score."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "units"


def keys(name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def test_deadman_timer_fires_every_minute_to_the_second_half_way_between_whole_minutes():
    """Not on the whole minute, where session fires and periodic slots are: its pass would start
    a Python process at their instant (issue 28)."""
    t = keys("market-deadman.timer")
    assert t["OnCalendar"] == ["*-*-* *:*:30 UTC"] and t["AccuracySec"] == ["1s"]
    assert t["WantedBy"] == ["timers.target"]


def test_refresh_timer_runs_daily_in_utc_and_after_boot_and_catches_up():
    t = keys("market-refresh.timer")
    assert t["OnCalendar"] == ["*-*-* 06:00:00 UTC"] and t["OnBootSec"] == ["1min"]
    assert t["Persistent"] == ["true"]


def test_deadman_runs_unprivileged_with_name_only_credentials():
    s = keys("market-deadman.service")
    assert s["User"] == ["market-timers"] and s["ExecStart"] == ["/usr/bin/market-timers deadman"]
    assert "market-timers.deadman-ping-url" in s["LoadCredential"]
    # an absolute path that does not exist fails the unit (243/CREDENTIALS); a name is optional
    assert all(":" not in c and "/" not in c for c in s["LoadCredential"])


def test_refresh_never_uses_the_network_and_writes_only_what_sync_needs():
    s = keys("market-refresh.service")
    assert s["PrivateNetwork"] == ["yes"] and s["RestrictAddressFamilies"] == ["AF_UNIX"]
    paths = " ".join(s["ReadWritePaths"]).split()
    assert paths == ["/etc/systemd/system", "/var/lib/market-timers", "/var/spool/market-timers",
                     "-/var/lib/market-timers-requests",  # in/ and out/ (issue 41)
                     "-/var/lib/systemd/timers", "-/var/lib/prometheus/node-exporter"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_timer_calendars_parse():
    for spec in ("*-*-* *:*:30 UTC", "*-*-* 06:00:00 UTC"):
        proc = subprocess.run(["systemd-analyze", "calendar", spec], capture_output=True,
                              text=True)
        assert proc.returncode == 0 and "Next elapse: never" not in proc.stdout


def test_every_service_of_the_package_alerts_its_own_failure_and_the_handlers_do_not_recurse():
    from market_timers.contracts.unitname import PACKAGE_SERVICES

    services = sorted(p.name for p in UNITS.glob("*.service") if "@" not in p.name)
    assert services == sorted(PACKAGE_SERVICES)  # one list: the heartbeat's, the handler's
    for name in services:
        assert keys(name).get("OnFailure") == ["market-alert-failure@%n.service"], name
    for template in UNITS.glob("market-alert-*@.service"):
        assert "OnFailure" not in keys(template.name), template.name


def test_the_events_processor_loads_every_channels_default_secret_and_its_drop_in_the_rest():
    from market_timers.channels import NAMES, lookup
    from market_timers.schedule import credunits

    defaults = {s.default for n in NAMES for s in lookup(n).credentials()}
    assert set(keys("market-events.service")["LoadCredential"]) == defaults
    assert "market-events.service" in credunits.CHANNEL_UNITS
