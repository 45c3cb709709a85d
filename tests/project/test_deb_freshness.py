"""The e2e tests' .deb is rebuilt when the package's sources changed since its build
(tests/e2e/debpkg.py): by content, so an edit made while `make deb` ran is not lost."""

import os
import subprocess

from tests.e2e.debpkg import is_fresh, sources_digest


def _repo(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("dist/\n")  # as the project's
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "mod.py").write_text("A = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    return tmp_path


def _built(repo, digest):
    deb = repo / "dist" / "bookworm" / "market-timers_0.1_amd64.deb"
    deb.parent.mkdir(parents=True)
    deb.write_bytes(b"deb")
    (deb.parent / ".sources-sha256").write_text(f"{digest} {deb.name}\n")
    return deb


def test_a_deb_built_from_todays_sources_is_fresh(tmp_path):
    repo = _repo(tmp_path)
    assert is_fresh(_built(repo, sources_digest(repo)), repo)


def test_an_edit_during_the_build_makes_the_deb_stale_though_the_deb_is_newer(tmp_path):
    repo = _repo(tmp_path)
    before = sources_digest(repo)  # taken as the build starts
    (repo / "generator" / "mod.py").write_text("A = 2\n")  # edited while it runs
    os.utime(repo / "generator" / "mod.py", (1, 1))  # older than the .deb, by mtime
    assert not is_fresh(_built(repo, before), repo)


def test_a_test_edit_does_not_make_the_deb_stale(tmp_path):
    repo = _repo(tmp_path)
    deb = _built(repo, sources_digest(repo))
    (repo / "tests" / "test_x.py").write_text("x = 1\n")
    assert is_fresh(deb, repo)


def test_a_deb_without_its_digest_is_stale(tmp_path):
    repo = _repo(tmp_path)
    deb = _built(repo, sources_digest(repo))
    (deb.parent / ".sources-sha256").unlink()
    assert not is_fresh(deb, repo)
