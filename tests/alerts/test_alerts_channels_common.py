"""What every HTTP channel of the registry must do, whichever it is: a redirect is a failed attempt
(never followed), `timeout` is the deadline of the whole attempt, a 429 waits for Retry-After.

The channels come from the registry: a new channel fails here until POINT says how to aim it at
a test server (and then it is held to the same rules)."""

from __future__ import annotations

import pytest
from tests.fakes.misbehaving import RedirectServer, TrickleServer

from market_timers.alerts.model import Alert
from market_timers.channels import NAMES, make_channel
from market_timers.channels.base import DeliveryError

SMTP = {"email"}  # not HTTP: tests/alerts/test_alerts_email.py and test_alerts_http.py


def _file(creds, name, text):
    (creds / name).write_text(text + "\n")


# channel -> (its [alerts.<name>] table, pointed at `base`; writes its URL credentials)
POINT = {
    "telegram": lambda creds, base: {"chat_id": "-1", "api_base": base},
    "slack": lambda creds, base: _file(creds, "market-timers.slack-webhook",
                                       base + "/services/T/B/x") or {},
    "webhook": lambda creds, base: _file(creds, "market-timers.webhook-url", base + "/hook/x") or {},
    "pagerduty": lambda creds, base: {"api_base": base},
    "ntfy": lambda creds, base: _file(creds, "market-timers.ntfy-topic-url",
                                      base + "/ntfy/topic") or {},
}
HTTP = [n for n in NAMES if n not in SMTP]


def test_every_registered_http_channel_is_covered_here():
    assert sorted(POINT) == sorted(HTTP)


def _alert():
    return Alert(id="1130-0123abcd", kind="failed", severity="critical", key="failed:signal",
                 title="signal failed", text="boom", job="signal", created="2026-11-30T14:31:05Z")


def _channel(make_ctx, creds, name, base, **settings):
    ctx = make_ctx({name: {**POINT[name](creds, base), **settings}}, routes={},
                   fallback=[name])
    return make_channel(name, ctx.cfg, env=ctx.env)


@pytest.mark.parametrize("name", HTTP)
@pytest.mark.parametrize("status", [301, 307])
def test_a_redirect_is_a_permanent_failure_and_is_not_followed(make_ctx, creds, name, status):
    with RedirectServer(status) as server:
        channel = _channel(make_ctx, creds, name, server.url)
        with pytest.raises(DeliveryError) as err:
            channel.send(_alert())
        assert [method for method, _ in server.requests] == ["POST"]  # Location never fetched
    assert err.value.permanent and f"answered {status} (a redirect)" in str(err.value)


@pytest.mark.parametrize("name", HTTP)
def test_the_timeout_is_the_deadline_of_the_whole_attempt(make_ctx, creds, name):
    with TrickleServer(every=0.3) as server:
        channel = _channel(make_ctx, creds, name, server.url, timeout=1)
        with pytest.raises(DeliveryError) as err:
            channel.send(_alert())  # the whole answer would take 40 x 0.3 s = 12 s
    assert not err.value.permanent and "deadline" in str(err.value)


@pytest.mark.parametrize("name", HTTP)
def test_a_429_is_transient_and_carries_retry_after(make_ctx, creds, api, name):
    channel = _channel(make_ctx, creds, name, api.base)
    api.fail_next(name, 429, retry_after=7)
    with pytest.raises(DeliveryError) as err:
        channel.send(_alert())
    assert not err.value.permanent and err.value.retry_after == 7
    channel.send(_alert())  # the next try is delivered
    assert len(api.received(name)) == 1
