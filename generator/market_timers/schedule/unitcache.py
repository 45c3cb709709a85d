"""What the last sync wrote, so that a sync with nothing to change renders and reads nothing.

For each unit file sync left in the unit directory: its identity on disk (inode, size, mtime and
ctime in ns) and a digest of the fire it was rendered from; for the whole file, a digest of every
other input of a render (the config, the runner, the templates and the rendering code). A unit
whose file still has that identity and whose fire and inputs are the same is as sync would write
it again: it is neither rendered (2.5 s at 1,000 jobs x 10 sessions) nor read back (1.1 s).
Anything else (an edited, replaced or missing file, another fire, a changed config, a cache that
is missing or not ours) is rendered and compared, as without a cache.

The cache vouches for unit files, so it has their writers only: /var/cache/market-timers/ (root's,
0700) for the system unit directory, else a dot-file in the unit directory itself (tests, a
`render --out`-like tree); never the state directory, which the package's user writes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from market_timers import __version__
from market_timers.files import atomicfile
from market_timers.schedule import installed, render, unitenv, unitescape

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
SYSTEM_CACHE = Path("/var/cache/market-timers/units.json")
LOCAL_CACHE = ".market-timers-units.json"
FORMAT = 1
_CODE = (render, unitenv, unitescape, installed)  # a change to any of them changes every unit
_TEMPLATES = ("job.service.j2", "job.timer.j2")


def path_for(unit_dir: Path) -> Path:
    return SYSTEM_CACHE if Path(unit_dir) == SYSTEM_UNIT_DIR else Path(unit_dir) / LOCAL_CACHE


def inputs_digest(config, runner: str) -> str:
    """Every input of a render but the fire: a config's repr is its loaded value, in order."""
    h = hashlib.sha256(f"{FORMAT}\0{__version__}\0{runner}\0{config!r}".encode())
    for module in _CODE:
        h.update(Path(module.__file__).read_bytes())
    for name in _TEMPLATES:
        h.update((render.template_dir() / name).read_bytes())
    return h.hexdigest()


def fire_digest(fire) -> str:
    return hashlib.blake2b(repr(fire).encode(), digest_size=12).hexdigest()


def identity(st: os.stat_result) -> list[int]:
    """A file replaced, edited or touched (even with its mtime put back: ctime) is another."""
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


@dataclass
class UnitCache:
    file: Path
    inputs: str
    units: dict[str, list] = field(default_factory=dict)  # name -> identity + [fire digest]

    def as_written(self, name: str, st: os.stat_result | None, digest: str) -> bool:
        """The file at `name` is the one sync wrote from the same inputs and fire."""
        entry = self.units.get(name)
        return st is not None and entry is not None and entry == [*identity(st), digest]

    def known(self, name: str, st: os.stat_result) -> bool:
        """The file at `name` is one sync wrote (whatever its fire): no need to read its mark."""
        entry = self.units.get(name)
        return entry is not None and entry[:4] == identity(st)


def as_written(cache: UnitCache, fires: list,
                stats: dict[str, os.stat_result]) -> tuple[set[str], dict[str, str]]:
    """The stems whose two unit files are as sync wrote them from these very fires, and each
    fire's unit names -> its digest (for the cache sync leaves)."""
    same, digests = set(), {}
    for f in fires:
        if f.is_daily:
            continue
        stem, digest = f.unit_stem, fire_digest(f)
        timer, service = f"{stem}.timer", f"{stem}.service"
        digests[timer] = digests[service] = digest
        if (cache.as_written(timer, stats.get(timer), digest)
                and cache.as_written(service, stats.get(service), digest)):
            same.add(stem)
    return same, digests


def load(file: Path, inputs: str) -> UnitCache:
    """The cache of these inputs; an empty one if missing, unreadable, not ours or of others."""
    try:
        with open(file, "rb") as f:
            doc = json.loads(f.read(64 << 20))
        if doc.get("format") == FORMAT and doc.get("inputs") == inputs \
                and isinstance(doc.get("units"), dict):
            return UnitCache(file, inputs, doc["units"])
    except (OSError, ValueError, AttributeError):
        pass
    return UnitCache(file, inputs)


def save(cache: UnitCache, unit_dir: Path, digests: dict[str, str],
         untouched: dict[str, os.stat_result] | None = None) -> None:
    """Record the units now in unit_dir (name -> fire digest; `untouched`: the stat of those
    this sync found and left as they were); never fails a sync (a lost cache costs the next
    sync its time only)."""
    untouched = untouched or {}
    units = {}
    for name, digest in digests.items():
        try:
            st = untouched.get(name) or os.stat(Path(unit_dir) / name)
        except OSError:
            continue
        units[name] = [*identity(st), digest]
    if units == cache.units:  # an unchanged sync writes nothing
        return
    doc = {"format": FORMAT, "inputs": cache.inputs, "units": units}
    try:
        cache.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomicfile.write(cache.file, json.dumps(doc, separators=(",", ":")),
                         sync=atomicfile.BATCH, mode=0o600)
    except OSError:
        pass
