"""The e2e rootfs is debootstrapped from the Debian archive this machine's apt already uses (the
project names no archive host of its own)."""

from __future__ import annotations

import pytest
from tests.e2e.rootfs import debian_mirror


def test_deb822_sources_give_the_archive_not_the_security_one(tmp_path, monkeypatch):
    monkeypatch.delenv("MARKET_TIMERS_E2E_MIRROR", raising=False)
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.internal.example/debian-security\n"
        "Suites: bookworm-security\n\nTypes: deb\nURIs: http://mirror.internal.example/debian/\n"
        "Suites: bookworm\n")
    (d / "other.list.disabled").write_text("deb http://elsewhere.example/debian bookworm main\n")
    assert debian_mirror((tmp_path / "sources.list", d)) == "http://mirror.internal.example/debian"


def test_one_line_sources_and_the_override(tmp_path, monkeypatch):
    monkeypatch.delenv("MARKET_TIMERS_E2E_MIRROR", raising=False)
    listing = tmp_path / "sources.list"
    listing.write_text("# deb http://old.example/debian bookworm main\n"
                       "deb [signed-by=/k.gpg] http://proxy.example:3142/debian bookworm main\n")
    assert debian_mirror((listing,)) == "http://proxy.example:3142/debian"
    monkeypatch.setenv("MARKET_TIMERS_E2E_MIRROR", "http://chosen.example/debian")
    assert debian_mirror((listing,)) == "http://chosen.example/debian"


def test_no_debian_archive_says_how_to_set_one(tmp_path, monkeypatch):
    monkeypatch.delenv("MARKET_TIMERS_E2E_MIRROR", raising=False)
    with pytest.raises(RuntimeError, match="MARKET_TIMERS_E2E_MIRROR"):
        debian_mirror((tmp_path / "missing.list",))
