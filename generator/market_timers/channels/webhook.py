"""Generic JSON webhook: POST the alert (id, kind, severity, key, title, text, job, session,
details) to a URL kept in a credential. 2xx is delivered; 429 honours Retry-After; other 4xx are
permanent; 5xx and network errors are transient."""

from __future__ import annotations

from market_timers.channels import spec
from market_timers.channels.base import HttpChannel


class WebhookChannel(HttpChannel):
    name = "webhook"

    def send(self, alert) -> None:
        url = self.secret(self.settings.url_credential)
        payload = {k: getattr(alert, k) for k in ("id", "kind", "severity", "key", "title",
                                                  "text", "job", "session", "created",
                                                  "repeat", "suppressed")}
        payload["details"] = alert.details
        payload["message"] = alert.body()
        self.send_json(url, payload)


SPEC = spec.ChannelSpec(
    name="webhook",
    summary="the alert as JSON (id, kind, severity, key, title, text, details, message) to a URL",
    settings=(
        spec.credential("url_credential", "market-timers.webhook-url",
                        "the credential holding the URL"),
        spec.timeout(),
    ),
    channel=WebhookChannel,
)
