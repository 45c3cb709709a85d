"""The end of a test run outside CI: what was skipped, grouped by reason, and the real recipe.

A run on a machine without root, mandoc, promtool, PostgreSQL or systemd-nspawn is green but
full of skips; this says which and why, and that `.ci/run` installs everything (under CI=true a
skip is a failure anyway, and nothing is printed). Loaded by tests/conftest.py.
"""

from __future__ import annotations

import os
from collections import Counter


def _reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ").strip()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if os.environ.get("CI") == "true":
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
    if not skipped:
        return
    reasons = Counter(_reason(r) for r in skipped)
    write = terminalreporter.write_line
    terminalreporter.section("what was skipped, and why")
    write(f"{len(skipped)} tests skipped on this machine:")
    width = len(str(max(reasons.values())))
    for reason, count in reasons.most_common():
        write(f"  {count:>{width}}  {reason}")
    write("To run them: install the packages .ci/run installs (HACKING.md, \"The test suite\") and run as "
          "root, or run `CI=true bash .ci/run` on a fresh Debian 12 machine (there a skip is a "
          "failure).")
