"""Fixtures for the events tests: the shipped example config with channels at the fake APIs."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(ROOT / "generator")):
    if p not in sys.path:
        sys.path.insert(0, p)

from tests.fakes.http_api import FakeApi  # noqa: E402

from market_timers.alerts.context import AlertContext  # noqa: E402
from market_timers.channels.credentials import OVERRIDE  # noqa: E402
from market_timers.config import loader as config_mod  # noqa: E402
from market_timers.schema.problems import ConfigError, Problems  # noqa: E402

EXAMPLE = ROOT / "scripts" / "examples" / "market-timers.example.toml"
TOKEN = "123456:FAKE-telegram-token-for-tests"
SLACK_PATH = "/services/T0FAKE/B0FAKE/fakeSlackSecretPath"


@pytest.fixture
def api():
    with FakeApi(token=TOKEN) as fake:
        yield fake


@pytest.fixture
def creds(tmp_path, api) -> Path:
    d = tmp_path / "creds"
    d.mkdir()
    (d / "market-timers.telegram-token").write_text(TOKEN + "\n")
    (d / "market-timers.slack-webhook").write_text(api.base + SLACK_PATH + "\n")
    return d


def load_raw(raw: dict, tmp_path: Path):
    raw = {**raw, "state_dir": str(tmp_path / "state"), "spool_dir": str(tmp_path / "spool"),
           "runtime_dir": str(tmp_path / "run")}
    problems = Problems(str(EXAMPLE))
    cfg = config_mod.parse(raw, problems)
    if problems:
        raise ConfigError(problems)
    return cfg


@pytest.fixture
def example(tmp_path, api):
    """example(events=..., alerts=...) -> the shipped example config, channels at the fakes."""

    def make(events="example", **alerts):
        raw = tomllib.loads(EXAMPLE.read_text())
        if events != "example":
            raw.pop("events", None)
            if events is not None:
                raw["events"] = events
        raw["alerts"] = {"telegram": {"chat_id": "-1001", "api_base": api.base}, "slack": {},
                         **alerts}
        return load_raw(raw, tmp_path)

    return make


@pytest.fixture
def ctx_for(tmp_path, creds):
    def make(cfg) -> AlertContext:
        return AlertContext(cfg.alerts, cfg.state_dir, cfg.spool_dir, env={OVERRIDE: str(creds)})

    return make


@pytest.fixture
def dirs(tmp_path) -> list[str]:
    out = [tmp_path / "spool" / "events", tmp_path / "run" / "events"]
    for d in out:
        d.mkdir(parents=True)
    return [str(d) for d in out]
