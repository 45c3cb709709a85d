"""Every HTTP channel of the registry sends through HttpChannel.send_json, the one send path.

send_json is replaced by a recorder and the POST below it by a tripwire: a channel that posts any
other way (its own post, its own status mapping) never reaches the recorder, or trips the wire.
A new channel in NAMES is held to this unless it is listed in SMTP."""

from __future__ import annotations

import pytest

from market_timers.alerts.model import Alert
from market_timers.channels import NAMES, httppost, lookup, make_channel
from market_timers.channels.base import HttpChannel

SMTP = {"email"}  # not HTTP
HTTP = [n for n in NAMES if n not in SMTP]
SETTINGS = {"telegram": {"chat_id": "-1"}}  # the required keys; the conftest writes the URLs


def _alert(kind="failed"):
    return Alert(id="1130-0123abcd", kind=kind, severity="critical", key=f"{kind}:signal",
                 title="signal failed", text="boom", job="signal", created="2026-11-30T14:31:05Z")


def _channel(make_ctx, name):
    ctx = make_ctx({name: SETTINGS.get(name, {})}, routes={}, fallback=[name])
    return make_channel(name, ctx.cfg, env=ctx.env)


@pytest.fixture
def sent(monkeypatch):
    """The (channel, url, payload, headers) of every send_json; any other POST fails the test."""
    calls = []

    def record(self, url, payload, headers=None):
        calls.append((self.name, url, payload, headers))

    def tripwire(*args, **kwargs):
        raise AssertionError("an HTTP POST that did not go through send_json")

    monkeypatch.setattr(HttpChannel, "send_json", record)
    monkeypatch.setattr(httppost, "post", tripwire)
    return calls


@pytest.mark.parametrize("name", HTTP)
def test_every_http_channel_sends_through_send_json(make_ctx, sent, name):
    channel = _channel(make_ctx, name)
    assert isinstance(channel, HttpChannel)
    assert type(channel).send_json is HttpChannel.send_json  # an override would bypass it
    channel.send(_alert())
    [(who, url, payload, _headers)] = sent
    assert who == name and isinstance(url, str) and url and isinstance(payload, dict) and payload


def test_a_pagerduty_test_alert_sends_both_events_through_send_json(make_ctx, sent):
    _channel(make_ctx, "pagerduty").send(_alert(kind="test"))
    assert [payload["event_action"] for _, _, payload, _ in sent] == ["trigger", "resolve"]


@pytest.mark.parametrize("name", sorted(SMTP))
def test_the_channels_left_out_are_not_http_channels(name):
    assert name in NAMES and not issubclass(lookup(name).channel, HttpChannel)
