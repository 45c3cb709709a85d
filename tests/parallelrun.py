"""How `make test` runs the suite side by side (pytest-xdist, `-n 7 --dist loadgroup`), and the
time of each part at the end of the run.

Seven parts, one worker each: the unit tier ("unit", in one process as before: its tests were
never written to run beside each other), and for each Debian release its cluster tests
("e2e-d12-cluster") and its other e2e tests in two halves, each half a container of its own
("e2e-d12" and "e2e-d12-b": a release's session fixtures, its container, live in one process).
The e2e tests mostly wait for real instants, so the seven share the two cores well.

The part is read from the test's id alone, in the main process, by a scheduler of our own:
xdist's own grouping (the xdist_group mark) renames `item._nodeid`, which pytest 9 no longer
reads (it keeps the id in `item._id`), so under pytest 9 every test was scheduled on its own.
Loaded by tests/conftest.py; without xdist the summary still says how long each part took.
"""

from __future__ import annotations

import re

import pytest

# A release's tests have its short name (tests/e2e/rootfs.py, Release.short: d12) among their
# parameter ids: test_x[d12], test_y[d13-stale] (other ids may hold brackets and dashes).
RELEASE_ID = re.compile(r"^d\d+$")
# Tests of a release that need only its rootfs, not its container or .deb: they run with the unit
# tier, beside the releases' workers (`make demo` on a fresh system: minutes of apt and pip).
ROOTFS_ONLY = ("tests/e2e/test_setup_fresh.py::",)
# A release's cluster tests (three containers of their own, a third of its e2e time, mostly
# waiting for instants): a part of their own, beside the release's other e2e tests. The two
# processes share the release's .deb (tests/e2e/debpkg.py builds it once, under a lock).
OWN_CLUSTER = ("tests/e2e/test_cluster.py::",)
# The second half of a release's other e2e tests, booted in a second container: the files whose
# tests wait longest for instants (sessions, slots, the dead-man), about half the release's time
# (one container ran them all after the other: 1,410 s, the run's critical path; the first
# split, six files, left 1,224 s to the first half and 733 s to the second).
SECOND_CONTAINER = tuple(f"tests/e2e/{name}.py::" for name in (
    "test_periodic", "test_periodic_held", "test_told", "test_upgrade", "test_watch",
    "test_halt", "test_operator_controls", "test_outbox", "test_events", "test_requires"))


def part_of(nodeid: str) -> str:
    """'e2e-d12' / 'e2e-d13' for a test of one release ('e2e-d12-cluster' for its cluster
    tests, 'e2e-d12-b' for its second container's), else 'unit'."""
    name = nodeid.rsplit("::", 1)[-1]
    ids = name.partition("[")[2].removesuffix("]").split("-") if "[" in name else []
    found = [i for i in ids if RELEASE_ID.match(i)]
    if not found or nodeid.startswith(ROOTFS_ONLY):
        return "unit"
    if nodeid.startswith(OWN_CLUSTER):
        return f"e2e-{found[0]}-cluster"
    return f"e2e-{found[0]}" + ("-b" if nodeid.startswith(SECOND_CONTAINER) else "")


def _scheduler_class():
    from xdist.scheduler import LoadScopeScheduling

    class ByPart(LoadScopeScheduling):
        """xdist's scope scheduling, a scope being a part: each part runs in one worker, the
        largest first (--loadscope-reorder, xdist's default)."""

        def _split_scope(self, nodeid: str) -> str:
            return part_of(nodeid)

    return ByPart


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    return _scheduler_class()(config, log)


class PartTimes:
    """Per part: how many tests, and the wall time from the first start to the last stop."""

    def __init__(self) -> None:
        self.spans: dict[str, list[float]] = {}
        self.tests: dict[str, set[str]] = {}

    def add(self, report: pytest.TestReport) -> None:
        if not report.start:
            return
        part = part_of(report.nodeid)
        span = self.spans.setdefault(part, [report.start, report.stop])
        span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
        self.tests.setdefault(part, set()).add(report.nodeid)

    def lines(self) -> list[str]:
        out = []
        for part in sorted(self.spans, key=lambda p: (p != "unit", p)):
            start, stop = self.spans[part]
            out.append(f"{part}: {len(self.tests[part])} tests, {stop - start:.0f} s "
                       f"(wall, first start to last stop)")
        return out


_times = PartTimes()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _times.add(report)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    lines = _times.lines()
    if not lines or hasattr(config, "workerinput"):  # a worker's summary is never shown
        return
    terminalreporter.section("time by part")
    for line in lines:
        terminalreporter.write_line(line)
