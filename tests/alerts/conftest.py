"""Fixtures for the alert tests: an injected clock, the fake HTTP APIs, credentials, contexts."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(ROOT / "generator")):
    if p not in sys.path:
        sys.path.insert(0, p)

from tests.fakes.http_api import FakeApi  # noqa: E402

from market_timers.alerts.context import AlertContext  # noqa: E402
from market_timers.channels.credentials import OVERRIDE  # noqa: E402
from market_timers.config.alerts import parse_alerts  # noqa: E402
from market_timers.schema.problems import Problems  # noqa: E402

TOKEN = "123456:FAKE-telegram-token-for-tests"
SLACK_PATH = "/services/T0FAKE/B0FAKE/fakeSlackSecretPath"
PD_KEY = "R0FAKEPAGERDUTYROUTINGKEY0000000"
NTFY_TOPIC = "mt-secret-topic-4f1c"
NTFY_TOKEN = "tk_fakentfyaccesstoken"


class Clock:
    def __init__(self, t: datetime):
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw) -> None:
        self.t += timedelta(**kw)


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 11, 30, 14, 31, 5, tzinfo=UTC))


@pytest.fixture
def api():
    with FakeApi(token=TOKEN, pagerduty_key=PD_KEY, ntfy_token=NTFY_TOKEN) as fake:
        yield fake


@pytest.fixture
def creds(tmp_path, api) -> Path:
    d = tmp_path / "creds"
    d.mkdir()
    (d / "market-timers.telegram-token").write_text(TOKEN + "\n")
    (d / "market-timers.slack-webhook").write_text(api.base + SLACK_PATH + "\n")
    (d / "market-timers.webhook-url").write_text(api.base + "/hook/x\n")
    (d / "market-timers.pagerduty-routing-key").write_text(PD_KEY + "\n")
    (d / "market-timers.ntfy-topic-url").write_text(f"{api.base}/ntfy/{NTFY_TOPIC}\n")
    (d / "market-timers.ntfy-token").write_text(NTFY_TOKEN + "\n")
    return d


def base_raw(api) -> dict:
    return {"telegram": {"chat_id": "-1001", "api_base": api.base}, "slack": {}}


@pytest.fixture
def make_ctx(tmp_path, clock, creds, api):
    """make_ctx(raw=None) -> AlertContext over tmp state/spool dirs, the clock and the fakes."""

    def make(raw: dict | None = None, **overrides) -> AlertContext:
        raw = base_raw(api) if raw is None else raw
        raw = {**raw, **overrides}
        problems = Problems()
        cfg = parse_alerts(raw, problems)
        assert not problems, problems.lines()
        return AlertContext(cfg, tmp_path / "state", tmp_path / "spool", now=clock,
                            env={OVERRIDE: str(creds)})

    return make
