"""A redirect is not a delivery; a send's timeout is a deadline for the whole attempt."""

from __future__ import annotations

import time

import pytest
from tests.fakes.misbehaving import RedirectServer, TrickleServer

from market_timers.alerts import delivery
from market_timers.alerts.api import raise_alert
from market_timers.alerts.model import Alert
from market_timers.channels import make_channel
from market_timers.channels.base import DeliveryError


def _alert():
    return Alert(id="1130-0123abcd", kind="failed", severity="critical", key="k",
                 title="signal failed", text="boom", job="signal")


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_a_failed_attempt_and_is_not_followed(make_ctx, creds, status):
    with RedirectServer(status) as server:
        (creds / "market-timers.webhook-url").write_text(server.url + "/hook/x\n")
        ctx = make_ctx(webhook={}, routes={"critical": "webhook"}, fallback=["webhook"])
        alert = raise_alert(ctx, kind="failed", job="signal", text="boom")
        assert server.requests == [("POST", "/hook/x")]  # the Location was never fetched
    [spooled] = ctx.outbox.load_all()  # not delivered: still in the outbox
    assert spooled.id == alert.id
    assert f"answered {status} (a redirect)" in (spooled.last_error + " ".join(spooled.errors))


def test_a_trickling_server_cannot_hold_a_send_past_its_timeout(make_ctx, creds):
    with TrickleServer(every=0.3) as server:
        (creds / "market-timers.webhook-url").write_text(server.url + "/hook/x\n")
        ctx = make_ctx(webhook={"timeout": 1}, routes={"critical": "webhook"},
                       fallback=["webhook"])
        channel = make_channel("webhook", ctx.cfg, env=ctx.env)
        started = time.monotonic()
        with pytest.raises(DeliveryError) as err:
            channel.send(_alert())
        took = time.monotonic() - started
    # the whole answer takes 40 x 0.3 s = 12 s; the attempt ends at its 1 s deadline
    assert took < 5 * 1
    assert not err.value.permanent
    assert "deadline" in str(err.value)


def test_a_trickled_attempt_is_counted_as_failed_by_the_flush(make_ctx, creds, clock):
    with TrickleServer(every=0.3) as server:
        (creds / "market-timers.webhook-url").write_text(server.url + "/hook/x\n")
        ctx = make_ctx(webhook={"timeout": 1}, routes={"critical": "webhook"},
                       fallback=["webhook"])
        raise_alert(ctx, kind="failed", job="signal", text="boom", deliver=False)
        counts = delivery.flush(ctx)
    assert counts[delivery.RETRY] == 1 and counts[delivery.DELIVERED] == 0
    [spooled] = ctx.outbox.load_all()
    assert spooled.attempts == 1
    assert "deadline" in spooled.last_error


def test_a_url_with_a_control_character_is_never_echoed(make_ctx, creds, caplog):
    secret = "http://127.0.0.1:9/hook/SECRET\x07x"
    (creds / "market-timers.webhook-url").write_text(secret)
    ctx = make_ctx(webhook={}, routes={"critical": "webhook"}, fallback=["webhook"])
    channel = make_channel("webhook", ctx.cfg, env=ctx.env)
    with pytest.raises(DeliveryError) as err:
        channel.send(_alert())
    assert err.value.permanent
    assert "SECRET" not in str(err.value)


def test_a_trickling_smtp_server_cannot_hold_an_email_past_its_timeout(make_ctx):
    from market_timers.channels.email import SPEC, EmailChannel

    with TrickleServer(every=0.3, wait_request=False) as server:
        port = int(server.url.rsplit(":", 1)[1])
        channel = EmailChannel(SPEC.make_settings(host="127.0.0.1", port=port, sender="a@b.c",
                                           to=["ops@b.c"], timeout=1.0), env={})
        started = time.monotonic()
        with pytest.raises(DeliveryError) as err:
            channel.send(_alert())
        assert time.monotonic() - started < 5 * 1
    assert "deadline" in str(err.value) and not err.value.permanent
