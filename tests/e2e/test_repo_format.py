"""Release version suffixes and the flat apt repository of scripts/make-repo, without booting
anything (runs with the unit tests; the e2e suite installs from such a repository with apt)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .debpkg import REPO, make_repo
from .rootfs import RELEASES, SUITES, release


def version_lt(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0


def changelog_version() -> str:
    first = (REPO / "debian/changelog").read_text().splitlines()[0]
    return first.split("(", 1)[1].split(")", 1)[0]


def test_each_newer_release_gets_a_newer_version_and_a_new_upstream_version_beats_both() -> None:
    base = changelog_version()
    assert "~" not in base, "scripts/build-deb appends ~debNN to the changelog's version"
    versions = [f"{base}~{RELEASES[s].tag}" for s in SUITES]
    assert [RELEASES[s].number for s in SUITES] == sorted(RELEASES[s].number for s in SUITES)
    for older, newer in zip(versions, versions[1:], strict=False):
        assert version_lt(older, newer), (older, newer)  # a release upgrade upgrades it
    assert version_lt(versions[-1], f"{base}.1~{RELEASES[SUITES[0]].tag}")
    assert version_lt(versions[-1], base)  # a build without suffix (from source) wins


def test_unknown_release_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="bookworm, trixie"):
        release("sid")


def fake_deb(tmp: Path, version: str) -> Path:
    root = tmp / f"pkg-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: market-timers\nVersion: {version}\nArchitecture: amd64\n"
        "Maintainer: e2e <e2e@example.invalid>\nDescription: test\n")
    out = tmp / f"market-timers_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)],
                   check=True, capture_output=True)
    return out


def test_make_repo_gives_each_release_its_own_index_holding_only_its_build(tmp_path) -> None:
    if shutil.which("apt-ftparchive") is None or shutil.which("dpkg-deb") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("apt-ftparchive (apt-utils) is not installed (CI=true)", pytrace=False)
        pytest.skip("needs apt-ftparchive (apt-utils) and dpkg-deb")
    debs = {s: fake_deb(tmp_path, f"0.1.0~{RELEASES[s].tag}") for s in SUITES}
    out = make_repo(tmp_path / "repo", debs)
    for suite, deb in debs.items():
        packages = (out / suite / "Packages").read_text()
        versions = [line.split()[1] for line in packages.splitlines()
                    if line.startswith("Version:")]
        assert versions == [f"0.1.0~{RELEASES[suite].tag}"], packages
        filename = next(line.split()[1] for line in packages.splitlines()
                        if line.startswith("Filename:"))
        assert (out / filename).read_bytes() == deb.read_bytes()  # relative to the repo's root
        release_file = (out / suite / "Release").read_text()
        assert f"Suite: {suite}" in release_file
        assert " Packages\n" in release_file and " Packages.gz\n" in release_file
    assert not list(tmp_path.glob("repo.new.*")), "scratch directory left behind"


def test_make_repo_refuses_an_argument_that_is_not_release_equals_deb(tmp_path) -> None:
    result = subprocess.run([str(REPO / "scripts/make-repo"), str(tmp_path / "repo"),
                             str(tmp_path / "missing.deb")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "not RELEASE=DEB" in result.stderr or "apt-ftparchive" in result.stderr
    assert not (tmp_path / "repo").exists()
