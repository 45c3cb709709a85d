"""How `make test` runs the suite side by side (pytest-xdist, `--dist loadgroup`), and the time of
each part at the end of the run.

Three groups, one worker each: the unit tier ("unit", in one process as before: its tests were
never written to run beside each other), and the e2e tests of each Debian release
("e2e-bookworm", "e2e-trixie": a release's session fixtures, its container and its cluster, live
in one process). A release's e2e tests mostly wait for real instants, so the three share the two
cores well. Loaded by tests/conftest.py; without xdist the marks are inert and the summary still
says how long each part took.
"""

from __future__ import annotations

import pytest

PROPERTY = "run-group"


# A release's session fixtures (tests/e2e/conftest.py, test_cluster.py): a test that uses one
# runs in its release's worker, where they are made once.
RELEASE_SESSION = frozenset({"deb_path", "booted", "deb_inside", "container", "scenario",
                             "release_cluster"})


def group_of(item: pytest.Item) -> str:
    """'e2e-<suite>' for a test that uses one of the release's session fixtures, else 'unit':
    the unit tier, and the e2e tests that need only a rootfs of the release (`make demo` on a
    fresh system, minutes of pip: beside the releases' workers, not on their clock)."""
    callspec = getattr(item, "callspec", None)
    suite = callspec.params.get("release") if callspec is not None else None
    if suite and RELEASE_SESSION & set(getattr(item, "fixturenames", ())):
        return f"e2e-{suite}"
    return "unit"


def pytest_configure(config: pytest.Config) -> None:
    # xdist registers the mark itself; without xdist (-p no:xdist) it is inert but known
    config.addinivalue_line("markers", "xdist_group(name): the pytest-xdist worker group")


@pytest.hookimpl(tryfirst=True)  # before xdist names the test by its group (nodeid@group)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = group_of(item)
        item.add_marker(pytest.mark.xdist_group(group))
        item.user_properties.append((PROPERTY, group))  # travels with the reports to the main


class PartTimes:
    """Per group: how many tests, and the wall time from the first start to the last stop."""

    def __init__(self) -> None:
        self.spans: dict[str, list[float]] = {}
        self.tests: dict[str, set[str]] = {}

    def add(self, report: pytest.TestReport) -> None:
        group = dict(report.user_properties).get(PROPERTY)
        if group is None or not report.start:
            return
        span = self.spans.setdefault(group, [report.start, report.stop])
        span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
        self.tests.setdefault(group, set()).add(report.nodeid)

    def lines(self) -> list[str]:
        out = []
        for group in sorted(self.spans, key=lambda g: (g != "unit", g)):
            start, stop = self.spans[group]
            out.append(f"{group}: {len(self.tests[group])} tests, {stop - start:.0f} s "
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
