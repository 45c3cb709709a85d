"""A thousand jobs on one host (issue 46): one `market-timers sync` installs and starts every
timer (in chunks: one `systemctl start` of ~7,900 units overflows the D-Bus client's queue), and
a second sync has nothing to do: no unit written, no daemon-reload. No timing is asserted here
(bench/scale.py measures); the horizon is short (2 sessions) to keep the test small."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from .container import Container
from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

JOBS = 1000


def active_timers(box: Container) -> set[str]:
    out = box.systemctl("list-units", "--type=timer", "--state=active", "--plain", "--no-legend",
                        "--full", "market-scale*").stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_a_thousand_jobs_sync_once_with_every_timer_active(scenario: Scenario) -> None:
    box = scenario.box
    first = instant_in(1800)  # none fires during the test
    jobs = [Job(f"scale{i:04d}", first + timedelta(seconds=i), ["ok"]) for i in range(JOBS)]
    scenario.write_config(jobs, horizon=2)
    done = box.run(["market-timers", "sync", "-v"], timeout=900)  # exit 0, or run() raises
    started = set(re.findall(r"^start (market-scale\d{4}@\S+\.timer)$", done.stdout, re.M))
    assert {t.split("@")[0] for t in started} == {f"market-{j.name}" for j in jobs}
    assert active_timers(box) == started  # every timer written is started, none left behind
    before = box.daemon_reloads()
    again = box.run(["market-timers", "sync"], timeout=900)
    assert again.stdout.strip().startswith("nothing to do"), again.stdout
    assert box.daemon_reloads() == before
    # sync's record of what it wrote (unitcache.py) never hides a unit changed behind its back:
    # one service edited by hand (its mtime put back) is rewritten, with one reload
    edited = f"/etc/systemd/system/{sorted(started)[0].removesuffix('.timer')}.service"
    box.run(f"touch -r {edited} /tmp/mtime && sed -i 's|^ExecStart=.*|ExecStart=/bin/false|' "
            f"{edited} && touch -r /tmp/mtime {edited}")
    fixed = box.run(["market-timers", "sync", "-v"], timeout=900)
    assert re.findall(r"^rewrite (\S+)$", fixed.stdout, re.M) == [edited.rsplit("/", 1)[1]]
    assert "/bin/false" not in box.run(["cat", edited]).stdout
    assert box.daemon_reloads() == before + 1
