"""Slack incoming webhook: POST `{"text": ...}` to the (secret) webhook URL.

200 `ok` is delivered; 429 carries `Retry-After`; `400 invalid_payload` / `no_text` and the
403/404 answers (`invalid_token`, `no_service`, `channel_not_found`...) are permanent; 5xx and
network errors are transient. The URL is the secret: it is never logged.
"""

from __future__ import annotations

from market_timers.channels import spec
from market_timers.channels.base import HttpChannel
from market_timers.channels.textfit import utf16_len

LIMIT = 3900  # Slack truncates `text` beyond 40,000 characters but advises under 4,000


def fit(alert) -> str:
    """Counted in UTF-16 units, as Telegram does: never more than Slack counts in characters."""
    return alert.body(excerpt_limit=LIMIT, measure=utf16_len)


class SlackChannel(HttpChannel):
    name = "slack"
    delivered = (200,)

    def send(self, alert) -> None:
        self.send_json(self.secret(self.settings.webhook_credential), {"text": fit(alert)})


SPEC = spec.ChannelSpec(
    name="slack",
    summary="a Slack incoming webhook message",
    settings=(
        spec.credential("webhook_credential", "market-timers.slack-webhook",
                        "the credential holding the webhook URL"),
        spec.timeout(),
    ),
    channel=SlackChannel, fit=fit, limit=LIMIT, measure=utf16_len,
)
