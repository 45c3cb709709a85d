"""bench/plainunits.py writes the same fires as bench/scale.py's jobs, as plain units: the
yardstick of issue 46's goals is only fair if it is the same work."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime

from bench import plainunits, scale


def test_plain_units_are_two_files_per_fire_at_the_jobs_instants(tmp_path):
    now = datetime(2026, 12, 7, 15, 0, 5, tzinfo=UTC).timestamp()
    tod = int(now) % 86400 + 3 * 3600
    first = int(now) - int(now) % 86400 + tod
    writer = plainunits.WRITER.replace(plainunits.UNIT_DIR, str(tmp_path))
    subprocess.run([sys.executable, "-c", writer, "3", "2", str(first)], check=True)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 3 * 2 * 2
    timer = (tmp_path / "bench-plain-0002-01.timer").read_text()
    # job 2 of scale.config_text: 3 h + 2 s after now's time of day; session 1: a day later
    assert re.search(r"^OnCalendar=2026-12-08 18:00:07 UTC$", timer, re.M), timer
    assert "offset = \"+18h0min7s\"" in scale.config_text(3, now)
    service = (tmp_path / "bench-plain-0002-01.service").read_text()
    assert "Type=oneshot" in service and "ExecStart=/bin/true" in service
