"""The dead-man's status page at N jobs (host, in-process): the CPU of one `statuspage.refresh`
(the page the dead-man rewrites after every pass) over the plan of N jobs on a 24/7 calendar at
the default horizon, nothing run yet, systemd's answers faked (PID 1's part is bench/scale.py's).

Run alone: .venv/bin/python -m bench.status_page [N ...]   (default 10 100 1000)
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ensure_repo_on_path  # noqa: E402
from bench.scale import config_text  # noqa: E402

ensure_repo_on_path()

SIZES = (10, 100, 1000)


class _NoUnits:
    def show(self, units, props):
        return {}


def refresh_cpu(jobs: int) -> tuple[float, float]:
    """(first, second) refresh's CPU seconds for `jobs` jobs."""
    from market_timers.config.loader import load
    from market_timers.schedule import plan as planning
    from market_timers.schedule.planmerge import write_plan
    from market_timers.watch import status, statuspage

    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        config_file = Path(tmp) / "c.toml"
        (Path(tmp) / "www").mkdir()
        config_file.write_text(f'state_dir = "{tmp}/state"\npage_dir = "{tmp}/www"\n'
                               + config_text(jobs, now.timestamp()))
        config = load(config_file)
        write_plan(config, planning.plan_ahead(config, now), now, None)
        status.Systemctl = _NoUnits
        out = []
        for _ in range(2):
            start = time.process_time()
            assert statuspage.refresh(config, now) is not None, "no page written"
            out.append(time.process_time() - start)
    return out[0], out[1]


def main(argv: list[str]) -> None:
    for jobs in [int(a) for a in argv] or SIZES:
        first, second = refresh_cpu(jobs)
        print(f"{jobs} jobs: status page refresh CPU {first:.3f} s first, {second:.3f} s next")


if __name__ == "__main__":
    main(sys.argv[1:])
