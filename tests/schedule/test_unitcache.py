"""A sync with nothing to change renders and reads no unit (schedule/unitcache.py, issue 46), and
is never fooled into keeping a unit that is not what it would write."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from market_timers.config import loader as config
from market_timers.contracts import environment
from market_timers.schedule import installed, sync, unitcache

from .test_sync_scale import JOBS, WED, Systemctl


@pytest.fixture
def synced(write_config, tmp_path):
    """A config synced once; (its path, the fake systemctl, a sync function)."""
    path = write_config(JOBS)
    sc = Systemctl()

    def again():
        return sync.sync(config.load(path), now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")

    again()
    return path, sc, again


@pytest.fixture
def counted(monkeypatch):
    """How many fires the next syncs render and how many unit files they read."""
    seen = {"rendered": 0, "read": 0}
    render_units, read = sync.iter_units, installed.UnitTexts.__getitem__

    def iter_units(cfg, fires, *a, **k):
        seen["rendered"] += len(fires)
        return render_units(cfg, fires, *a, **k)

    def getitem(self, name):
        seen["read"] += 1
        return read(self, name)

    monkeypatch.setattr(sync, "iter_units", iter_units)
    monkeypatch.setattr(installed.UnitTexts, "__getitem__", getitem)
    return seen


def services(path) -> dict[str, str]:
    units = config.load(path).unit_dir
    return {p.name: p.read_text() for p in sorted(units.glob("market-*.service"))}


def test_an_unchanged_sync_renders_and_reads_no_unit(synced, counted):
    _, sc, again = synced
    result = again()
    assert result.lines() == ["nothing to do"] and sc.reloads == 0
    assert counted == {"rendered": 0, "read": 0}


def test_a_unit_edited_by_hand_is_rewritten_even_with_its_mtime_put_back(synced, counted):
    path, sc, again = synced
    unit = sorted(config.load(path).unit_dir.glob("market-orders@*.service"))[0]
    text, st = unit.read_text(), unit.stat()
    unit.write_text(text.replace("/usr/bin/true", "/usr/bin/evil"))  # same size
    os.utime(unit, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = again()
    assert result.rewritten == [unit.name] and sc.reloads == 1
    assert unit.read_text() == text
    assert counted["rendered"] == 1  # that fire only


def test_a_changed_command_rewrites_that_jobs_units(synced, write_config):
    path, sc, again = synced
    write_config(JOBS.replace('offset = "+5min"\ncommand = ["/usr/bin/true"]',
                              'offset = "+5min"\ncommand = ["/usr/bin/false"]'))
    result = again()
    assert len(result.rewritten) == 3 and sc.reloads == 1
    assert all("/usr/bin/false" in t for n, t in services(path).items() if "orders" in n)


@pytest.mark.parametrize("garbage", [b"", b"{not json", b'{"format": 1, "inputs": "x"}',
                                     b'{"format": 1, "inputs": null, "units": []}', b"\xff" * 99])
def test_a_corrupt_or_stale_cache_is_only_a_slower_sync(synced, garbage):
    path, sc, again = synced
    cache = unitcache.path_for(config.load(path).unit_dir)
    before = services(path)
    cache.write_bytes(garbage)
    assert again().lines() == ["nothing to do"] and sc.reloads == 0
    assert services(path) == before
    assert unitcache.load(cache, unitcache.inputs_digest(
        config.load(path), config.load(path).runner or sync.default_runner())).units


def test_a_cache_claiming_a_unit_matches_another_fire_is_not_believed(synced, counted):
    """The digest of the fire each unit was rendered from is part of the match."""
    path, _, again = synced
    cfg = config.load(path)
    file = unitcache.path_for(cfg.unit_dir)
    cache = unitcache.load(file, unitcache.inputs_digest(cfg, cfg.runner or sync.default_runner()))
    name = sorted(cache.units)[0]
    cache.units[name][-1] = "another fire"
    unitcache.save(unitcache.UnitCache(file, cache.inputs), cfg.unit_dir,
                   {n: e[-1] for n, e in cache.units.items()})
    assert again().lines() == ["nothing to do"]
    assert counted["rendered"] == 1


def test_new_templates_render_every_unit_again(synced, tmp_path, monkeypatch):
    path, sc, again = synced
    templates = tmp_path / "templates"
    shutil.copytree(Path(__file__).resolve().parents[2] / "units", templates)
    service = templates / "job.service.j2"
    service.write_text(service.read_text().replace("[Service]", "[Service]\n# new", 1))
    monkeypatch.setenv(environment.TEMPLATES, str(templates))
    result = again()
    assert len(result.rewritten) == 6 and sc.reloads == 1
    assert all("# new" in t for t in services(path).values())


def test_the_cache_has_the_unit_files_writers_only(tmp_path):
    """Root's /var/cache for the system's units, never the state directory the package's user
    writes; beside the units in any other unit directory."""
    assert unitcache.path_for(Path("/etc/systemd/system")) == Path(
        "/var/cache/market-timers/units.json")
    assert unitcache.path_for(tmp_path / "units") == tmp_path / "units" / unitcache.LOCAL_CACHE
    file = tmp_path / "cache" / "units.json"
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "market-a@daily.timer").write_text("x")
    unitcache.save(unitcache.UnitCache(file, "i"), tmp_path / "u", {"market-a@daily.timer": ""})
    assert (file.parent.stat().st_mode & 0o777, file.stat().st_mode & 0o777) == (0o700, 0o600)
