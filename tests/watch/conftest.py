"""Fixtures for the deadman / refresh / status tests: a config in a tmp dir, a fake systemctl that
knows which timers were started (and whether their instant has passed at the test's clock), and a
recorder standing in for the alert layer."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_timers.config import loader as config_mod
from market_timers.ledger import runrecord
from market_timers.schedule import render

THANKSGIVING_CONFIG = """\
calendar = "XNYS"
horizon = 10

[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
grace = "2min"
timeout = "5min"
"""


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class FakeSystemctl:
    """Records every call; `show` answers like systemd would for the files in unit_dir."""

    def __init__(self, unit_dir: Path):
        self.unit_dir = unit_dir
        self.now = utc("2000-01-01T00:00:00Z")
        self.active: set[str] = set()
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.broken = False  # show returns nothing (D-Bus unreachable)
        self.failed: set[str] = set()  # units systemd shows as failed (the package's own)

    def show(self, units, props):
        units = list(units)
        self.calls.append(("show", tuple(units)))
        if self.broken:
            return {}
        out = {}
        for unit in units:
            path = self.unit_dir / unit
            if unit in self.failed:
                out[unit] = {"Id": unit, "LoadState": "loaded", "ActiveState": "failed",
                             "SubState": "failed"}
            elif not path.exists():
                out[unit] = {"Id": unit, "LoadState": "not-found", "ActiveState": "inactive",
                             "SubState": "dead"}
            elif unit not in self.active:
                out[unit] = {"Id": unit, "LoadState": "loaded", "ActiveState": "inactive",
                             "SubState": "dead"}
            else:
                instant = render.timer_instant(path.read_text())
                # a repeating OnCalendar (daily jobs) has no single instant: always waiting
                sub = "waiting" if instant is None or instant > self.now else "elapsed"
                out[unit] = {"Id": unit, "LoadState": "loaded", "ActiveState": "active",
                             "SubState": sub}
        return out

    def failed_units(self, patterns):
        """The failed units matching the globs (one `list-units --state=failed`)."""
        from fnmatch import fnmatchcase

        self.calls.append(("list-failed", tuple(patterns)))
        return sorted(u for u in self.failed if any(fnmatchcase(u, p) for p in patterns))

    def start(self, units):
        self.calls.append(("start", tuple(units)))
        self.active.update(units)

    def stop(self, units):
        self.calls.append(("stop", tuple(units)))
        self.active.difference_update(units)

    def reset_failed(self, units):
        self.calls.append(("reset-failed", tuple(units)))

    def daemon_reload(self):
        self.calls.append(("daemon-reload", ()))

    def called(self, verb: str) -> list[str]:
        return [u for v, units in self.calls if v == verb for u in units]


class AlertRecorder:
    def __init__(self):
        self.calls: list[dict] = []
        self.configs: list = []  # the config each alert was raised with

    def __call__(self, config, **kw):
        self.calls.append(kw)
        self.configs.append(config)
        return None

    def kinds(self) -> list[str]:
        return [c["kind"] for c in self.calls]


@pytest.fixture
def make_config(tmp_path: Path):
    """make_config(text) -> loaded Config whose unit/state/spool dirs are under tmp_path."""

    def make(text: str = THANKSGIVING_CONFIG, name: str = "market-timers.toml"):
        path = write(text, name)
        return config_mod.load(path)

    def write(text: str, name: str = "market-timers.toml") -> Path:
        prefix = (f'unit_dir = "{tmp_path}/units"\nstate_dir = "{tmp_path}/state"\n'
                  f'spool_dir = "{tmp_path}/spool"\nruntime_dir = "{tmp_path}/run"\n'
                  f'page_dir = "{tmp_path}/www"\n')
        path = tmp_path / name
        path.write_text(prefix + textwrap.dedent(text))
        return path

    make.write = write
    return make


@pytest.fixture
def fake_systemctl(tmp_path: Path) -> FakeSystemctl:
    return FakeSystemctl(tmp_path / "units")


@pytest.fixture
def alerts() -> AlertRecorder:
    return AlertRecorder()


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, str]]:
    """The (job, session)s whose run record is read, in order."""
    seen: list[tuple[str, str]] = []
    read = runrecord.read

    def counting(state_dir, job, session, *args, **kw):
        seen.append((job, session))
        return read(state_dir, job, session, *args, **kw)

    monkeypatch.setattr(runrecord, "read", counting)
    return seen
