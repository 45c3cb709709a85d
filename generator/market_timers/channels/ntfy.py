"""ntfy (https://ntfy.sh or a self-hosted server): publish the alert to a topic, as JSON.

The topic URL (`https://ntfy.sh/<topic>`) is a credential: on a public server whoever knows the
topic name can read it. An access token credential is optional (sent as a Bearer token when
loaded). The JSON is POSTed to the server's root with the topic in the body, so a title of any
characters needs no header encoding. Priority follows severity (critical 5, warning 4, info 3; a
recovery 3), tags name the severity (plus `tags` from the config), the title is the subject and
the message the rest, cut to ntfy's 4096-byte message limit (UTF-8), keeping the end of the
journal excerpt. 200 is delivered; 429 is transient (Retry-After honoured); other 4xx (401/403: a
token is missing or wrong, 413: too large) are permanent; 5xx and network errors are transient.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from market_timers.channels import spec
from market_timers.channels.base import DeliveryError, HttpChannel

LIMIT = 4096  # bytes of `message` (ntfy's default message-size-limit)
TITLE_LIMIT = 250
PRIORITY = {"critical": 5, "warning": 4, "info": 3}
TAG = {"critical": "rotating_light", "warning": "warning", "info": "information_source"}
TOPIC = re.compile(r"[-_A-Za-z0-9]{1,64}")  # ntfy's topic names


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def fit(alert) -> str:
    return alert.body(excerpt_limit=LIMIT, measure=utf8_len, with_subject=False)


def _split(topic_url: str) -> tuple[str, str]:
    """(server root URL, topic) of `https://host[/prefix]/topic`, or DeliveryError (no echo)."""
    parts = urlsplit(topic_url)
    prefix, _, topic = parts.path.rstrip("/").rpartition("/")
    if parts.scheme not in ("http", "https") or not parts.netloc or not TOPIC.fullmatch(topic) \
            or parts.query or parts.fragment:
        raise DeliveryError("ntfy: the topic URL credential is not http(s)://server/topic",
                            permanent=True)
    return f"{parts.scheme}://{parts.netloc}{prefix}/", topic


class NtfyChannel(HttpChannel):
    name = "ntfy"
    delivered = (200,)

    def error_code(self, response):
        return str(response.data.get("error") or "") or super().error_code(response)

    def send(self, alert) -> None:
        s = self.settings
        root, topic = _split(self.secret(s.topic_url_credential))
        token = self.optional_secret(s.token_credential) if s.token_credential else None
        recovery = alert.kind == "recovery"
        tags = ["white_check_mark" if recovery else TAG.get(alert.severity, "warning"), *s.tags]
        payload = {"topic": topic, "title": alert.subject()[:TITLE_LIMIT],
                   "message": fit(alert) or alert.subject(),
                   "priority": 3 if recovery else PRIORITY.get(alert.severity, 5), "tags": tags}
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.send_json(root, payload, headers=headers)


SPEC = spec.ChannelSpec(
    name="ntfy",
    summary="an ntfy push notification to a topic (priority from severity, title and tags)",
    settings=(
        spec.credential("topic_url_credential", "market-timers.ntfy-topic-url",
                        "the credential holding the topic URL, https://server/topic (a topic "
                        "name is a secret on a public server)"),
        spec.credential("token_credential", "market-timers.ntfy-token",
                        "the credential holding an access token (optional: sent when loaded)"),
        spec.strings("tags", "extra tags (emoji short codes) on every notification"),
        spec.timeout(),
    ),
    channel=NtfyChannel, fit=fit, fits="message", limit=LIMIT, measure=utf8_len,
)
