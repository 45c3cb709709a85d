"""Session fixtures for the end-to-end tests: a booted Debian 12 and a booted Debian 13, each with
the package built for it, installed with `apt install market-timers` from a flat apt repository.

Every test that uses `booted`, `container`, `scenario`, `deb_path` or `deb_inside` runs once per
release (test ids [d12] and [d13]; `-k d13` picks one); pytest groups the tests by release, so
each release is booted once per session, and one container runs at a time.
Under CI=true a missing prerequisite fails the tests; elsewhere it skips them.
Set MARKET_TIMERS_E2E_KEEP=1 to keep the container's rootfs after the session.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .container import Container, boot_refresh_over, fresh_container, missing_prerequisite
from .debpkg import REPO, ensure_deb, make_repo, prebuild_released
from .rootfs import RELEASES, SUITES, Release
from .scenario import TOKEN, Scenario

if str(REPO) not in sys.path:  # tests.fakes, also when the e2e tests run on their own
    sys.path.insert(0, str(REPO))

from tests.fakes.http_api import FakeApi  # noqa: E402

PACKAGE = "market-timers"
APT_REPO_INSIDE = "/srv/market-timers-repo"
APT_SOURCE = "/etc/apt/sources.list.d/market-timers.list"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_e2e() -> None:
    reason = missing_prerequisite()
    if reason is None:
        return
    reason = f"e2e tests {reason}"
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing prerequisite is a failure)", pytrace=False)
    pytest.skip(reason)


def timed(label: str, start: float) -> None:
    print(f"[e2e] {label}: {time.monotonic() - start:.1f}s")


@pytest.fixture(scope="session")
def repo_timers() -> list[str]:
    """The package's own timers: whatever units/*.timer the repo holds.

    Read before the .deb is built (deb_path asks for it first), so it never names
    a unit added to units/ after the build started.
    """
    return sorted(p.name for p in (REPO / "units").glob("*.timer"))


@pytest.fixture(scope="session", params=SUITES, ids=[RELEASES[s].short for s in SUITES])
def release(request: pytest.FixtureRequest) -> Release:
    """The Debian release under test: every fixture below depends on it."""
    return RELEASES[request.param]


@pytest.fixture(scope="session")
def deb_path(release: Release, repo_timers: list[str]) -> Path:
    require_e2e()
    start = time.monotonic()
    deb = ensure_deb(release.suite)
    timed(f"deb ready ({deb.name})", start)
    prebuild_released(release.suite)  # the upgrade test's 0.1.0 .deb, while the tests run
    return deb


@pytest.fixture(scope="session")
def booted(release: Release, deb_path: Path) -> Iterator[Container]:
    """A fresh copy of the release's cached rootfs, booted, with the package installed once
    from a flat apt repository (`apt install market-timers`, as README's Install says)."""
    keep = os.environ.get("MARKET_TIMERS_E2E_KEEP") == "1"
    start = time.monotonic()
    with fresh_container("mt-e2e", keep=keep, suite=release.suite) as box:
        timed(f"{release.suite} rootfs ready and booted in {box.boot_seconds:.1f}s ({box.root})",
              start)
        install_from_repo(box, release.suite, deb_path)
        yield box
    if keep:
        print(f"[e2e] kept {box.root}")


def install_from_repo(box: Container, suite: str, deb: Path) -> None:
    """scripts/make-repo into the container's /srv, a sources.list entry for it, then
    `apt-get install market-timers` (the Debian mirror's lists only if a dependency is missing)."""
    start = time.monotonic()
    make_repo(box.root / APT_REPO_INSIDE.lstrip("/"), {suite: deb})
    box.write_file(APT_SOURCE, f"deb [trusted=yes] file:{APT_REPO_INSIDE} {suite}/\n")
    box.run(["apt-get", "update", "-q", "-o", f"Dir::Etc::SourceList={APT_SOURCE}",
             "-o", "Dir::Etc::SourceParts=-", "-o", "APT::Get::List-Cleanup=0"], timeout=120)
    cmd = ["apt-get", "install", "-y", "-q", PACKAGE]
    if box.run(cmd, check=False, timeout=300).returncode != 0:
        box.run(["apt-get", "update", "-q"], timeout=300)
        box.run(cmd, timeout=300)
    timed(f"apt-get install {PACKAGE} (from {APT_REPO_INSIDE})", start)


def install_package(box: Container, deb_inside: str, *extra: str) -> None:
    start = time.monotonic()
    box.apt_install(deb_inside, *extra)
    timed("apt-get install " + " ".join(extra), start)


def is_installed(box: Container) -> bool:
    result = box.run(["dpkg-query", "-W", "-f=${Status}", PACKAGE], check=False)
    return result.stdout.strip() == "install ok installed"


@pytest.fixture(scope="session")
def deb_inside(booted: Container, deb_path: Path) -> str:
    """Path of the .deb inside the container (copied into its rootfs)."""
    return booted.copy_in(deb_path)


@pytest.fixture
def container(booted: Container, deb_inside: str) -> Container:
    """The session's container, healthy (booted again if an earlier test left it off or
    broken), with the package installed and the refresh of its boot over."""
    booted.ensure_healthy()
    if not is_installed(booted):
        install_package(booted, deb_inside)
    boot_refresh_over(booted)  # a test's own sync must not race the package's boot-time one
    return booted


@pytest.fixture(scope="session")
def fake_api() -> Iterator[FakeApi]:
    """Fake Telegram / Slack on the host's 127.0.0.1 (the container shares the host's network)."""
    api = FakeApi(token=TOKEN).start()
    yield api
    api.stop()


@pytest.fixture
def scenario(container: Container, fake_api: FakeApi) -> Iterator[Scenario]:
    """Job program, channel credentials and empty fakes; no job left behind afterwards."""
    scene = Scenario(container, fake_api)
    scene.install()
    yield scene
    container.ensure_healthy()
    scene.teardown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    box = getattr(item, "funcargs", {}).get("container")
    if report.failed and isinstance(box, Container):
        try:
            report.sections.append(("container diagnostics", box.diagnostics()))
        except Exception as exc:  # diagnostics must never mask the real failure
            report.sections.append(("container diagnostics", f"unavailable: {exc!r}"))
