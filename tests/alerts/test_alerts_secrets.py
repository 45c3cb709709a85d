"""Secrets (bot token, Slack webhook path, SMTP password) never reach a log line, stdout/stderr or
the spool, whatever goes wrong on the way."""

from __future__ import annotations

import logging

import pytest
from tests.alerts.conftest import SLACK_PATH, TOKEN

from market_timers.alerts.api import raise_alert
from market_timers.alerts.commands import alert_test, outbox_flush, outbox_list

SECRETS = (TOKEN, SLACK_PATH, "fakeSlackSecretPath", "s3cret-smtp-pass")


def everything_visible(ctx, caplog, capsys) -> str:
    outbox_list(ctx, as_json=True)
    spool = "".join(p.read_text() for p in ctx.spool_dir.rglob("*.json"))
    state = "".join(p.read_text() for p in ctx.state_dir.rglob("*") if p.is_file())
    out = capsys.readouterr()
    return caplog.text + out.out + out.err + spool + state


@pytest.mark.parametrize("telegram_status,slack_status", [
    (401, 500), (500, 403), (429, 429), (404, 400)])
def test_no_secret_in_logs_or_spool_when_channels_fail(make_ctx, api, clock, caplog, capsys,
                                                      telegram_status, slack_status):
    caplog.set_level(logging.DEBUG)
    ctx = make_ctx()
    api.fail_next("telegram", telegram_status, times=10, retry_after=1)
    api.fail_next("slack", slack_status, times=10, retry_after=1)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    for _ in range(5):
        clock.advance(minutes=3)
        outbox_flush(ctx, now=clock)
    seen = everything_visible(ctx, caplog, capsys)
    assert "j failed" in seen and str(telegram_status) in seen  # the logs do say what happened
    for secret in SECRETS:
        assert secret not in seen


def test_no_secret_when_the_api_base_is_unreachable_or_malformed(make_ctx, api, caplog, capsys,
                                                                 creds):
    caplog.set_level(logging.DEBUG)
    for base in ("http://127.0.0.1:9", "htp:/bad url", "http://[::1"):
        ctx = make_ctx(telegram={"chat_id": "1", "api_base": base}, fallback=["telegram"])
        raise_alert(ctx, kind="failed", job=f"j{base[-2:]}", session="2026-11-30")
        assert alert_test(ctx, "telegram") == 1
    seen = everything_visible(ctx, caplog, capsys)
    assert "network error" in seen and "malformed" in seen
    for secret in SECRETS:
        assert secret not in seen


def test_alert_test_telegram_delivers_and_prints_no_token(make_ctx, api, capsys):
    ctx = make_ctx()
    assert alert_test(ctx, "telegram") == 0
    [msg] = api.received("telegram")
    assert "test message" in msg["text"]
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err


def test_alert_test_unconfigured_channel_fails_with_a_hint(make_ctx, capsys):
    assert alert_test(make_ctx(), "webhook") == 1
    assert "[alerts.webhook]" in capsys.readouterr().err
