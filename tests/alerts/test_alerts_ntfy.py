"""ntfy against a fake on loopback: topic URL and token as credentials, priority from severity."""

from __future__ import annotations

import logging

import pytest
from tests.alerts.conftest import NTFY_TOPIC

from market_timers.alerts import delivery
from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.model import Alert
from market_timers.channels import make_channel
from market_timers.channels.base import DeliveryError

EMOJI = "\U0001F4A5"


def ntfy_ctx(make_ctx, api, ntfy=None, **over):
    raw = {"ntfy": ntfy or {}, "slack": {}}
    routes = {"critical": "ntfy", "warning": "ntfy", "info": "digest"}
    return make_ctx(raw, routes=routes, fallback=["ntfy", "slack"], **over)


def test_a_failure_is_published_to_the_topic_with_the_token_at_top_priority(make_ctx, api):
    ctx = ntfy_ctx(make_ctx, api, {"tags": ["chart_with_upwards_trend"]})
    alert = raise_alert(ctx, kind="failed", job="signal", job_severity="critical",
                        details={"journal": "Traceback: boom"})
    [msg] = api.received("ntfy")  # the fake answers 401 without the access token
    assert msg["topic"] == NTFY_TOPIC and msg["path"] == "/ntfy/"
    assert msg["title"] == alert.subject() and msg["priority"] == 5
    assert msg["tags"] == ["rotating_light", "chart_with_upwards_trend"]
    assert "Traceback: boom" in msg["text"] and not msg["text"].startswith("[CRITICAL]")


def test_warning_is_high_priority_and_a_recovery_is_default_priority(make_ctx, api):
    ctx = ntfy_ctx(make_ctx, api)
    raise_alert(ctx, kind="failed", job="report", job_severity="warning")
    record_success(ctx, job="report")
    [warning, recovery] = api.received("ntfy")
    assert (warning["priority"], warning["tags"]) == (4, ["warning"])
    assert (recovery["priority"], recovery["tags"]) == (3, ["white_check_mark"])


def test_without_the_token_a_protected_topic_is_a_permanent_failure(make_ctx, api, creds,
                                                                   caplog):
    (creds / "market-timers.ntfy-token").unlink()
    ctx = ntfy_ctx(make_ctx, api)
    with caplog.at_level(logging.DEBUG):
        raise_alert(ctx, kind="failed", job="signal", job_severity="critical")
    assert [m["service"] for m in api.received()] == ["slack"]  # fell back at once
    assert "ntfy: rejected (401 unauthorized)" in caplog.text


def test_the_message_fits_ntfys_4096_bytes_keeping_the_end_of_the_journal(make_ctx, api):
    ctx = ntfy_ctx(make_ctx, api)
    journal = "".join(f"line {i} {EMOJI}\n" for i in range(3000)) + "the real error"
    raise_alert(ctx, kind="failed", job="signal", job_severity="critical",
                details={"journal": journal})
    [msg] = api.received("ntfy")  # the fake answers 413 over 4096 bytes
    assert 4000 < len(msg["text"].encode()) <= 4096
    assert msg["text"].endswith("the real error")


def test_429_waits_for_retry_after(make_ctx, api, clock):
    ctx = ntfy_ctx(make_ctx, api)
    api.fail_next("ntfy", 429, retry_after=90)
    raise_alert(ctx, kind="failed", job="signal", job_severity="critical")
    clock.advance(seconds=60)
    assert delivery.flush(ctx)[delivery.WAITING] == 1 and api.received() == []
    clock.advance(seconds=31)
    assert delivery.flush(ctx)[delivery.DELIVERED] == 1


@pytest.mark.parametrize("url", ["ftp://h/topic", "https://h/", "https://h/a b", "nonsense",
                                 "https://h/topic?x=1"])
def test_a_malformed_topic_url_is_permanent_and_never_echoed(make_ctx, creds, url):
    (creds / "market-timers.ntfy-topic-url").write_text(url + "\n")
    ctx = ntfy_ctx(make_ctx, None)
    channel = make_channel("ntfy", ctx.cfg, env=ctx.env)
    with pytest.raises(DeliveryError) as err:
        channel.send(Alert(id="1130-0123abcd", kind="failed", severity="critical", key="k",
                           title="t"))
    assert err.value.permanent and url not in str(err.value)
