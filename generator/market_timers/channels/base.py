"""The channel interface, the delivery error and the one send path of the HTTP channels.

A channel's `send(alert)` returns on confirmed delivery or raises DeliveryError saying whether
the failure is permanent (retrying gives the same error: fall back at once) or transient
(retry later, not before `retry_after` seconds when the service asked for it).
Error texts are built from our own words, the status and the service's error code, then
redacted: urllib's exception texts can embed the URL, and the Telegram URL holds the token.

An HTTP channel subclasses HttpChannel: its `send` builds the URL and the payload and calls
`send_json`, which POSTs and maps the answer; the class declares only how its service answers
(`delivered`, `unconfirmed`, `error_code`, `retry_after`).
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import dataclass
from functools import cached_property

from market_timers.channels.credentials import read_credential, redact


class DeliveryError(Exception):
    def __init__(self, message: str, *, permanent: bool, retry_after: float | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


@dataclass
class HttpResponse:
    status: int
    body: str
    headers: dict

    @cached_property
    def data(self) -> dict:
        """The body as a JSON object; {} when it is not one (not JSON, or another JSON value)."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


class Channel:
    name = "channel"

    def __init__(self, settings, env: dict | None = None):
        self.settings = settings
        self.env = env
        self._secrets: list[str] = []

    def secret(self, credential: str) -> str:
        value = read_credential(credential, self.env)
        if value is None:
            raise DeliveryError(f"{self.name}: credential {credential} is not available "
                                "(see LoadCredential= and /etc/credstore)", permanent=True)
        self._secrets.append(value)
        return value

    def optional_secret(self, credential: str) -> str | None:
        """A secret the channel can do without (an access token): None when not loaded."""
        value = read_credential(credential, self.env)
        if value is not None:
            self._secrets.append(value)
        return value

    def send(self, alert) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def clean(self, text: str) -> str:
        return redact(text, self._secrets)


class HttpChannel(Channel):
    """A channel that POSTs JSON. By default any 2xx is delivered, the error code is the start of
    the body and Retry-After comes from the header; a channel overrides what its service does
    differently. tests/alerts/test_alerts_send_path.py holds every HTTP channel to send_json."""

    delivered: Container[int] = range(200, 300)  # the statuses that say the service took it

    def unconfirmed(self, response: HttpResponse) -> str | None:
        """What a `delivered` answer's body lacks to confirm delivery (say "ok=true"), which makes
        the attempt a transient failure; None when the status is enough."""
        return None

    def error_code(self, response: HttpResponse) -> str:
        """The service's error code or text in a refusal (redacted and cut when raised)."""
        return response.body.strip()[:80]

    def retry_after(self, response: HttpResponse) -> float | None:
        """The seconds the service asks to wait, None when it does not say."""
        return retry_after_header(response.headers)

    def send_json(self, url: str, payload: dict, headers: dict | None = None) -> None:
        """POST `payload` within the channel's `timeout`; return on delivery, else DeliveryError."""
        response = self._post_json(url, payload, self.settings.timeout, headers)
        if response.status in self.delivered:
            missing = self.unconfirmed(response)
            if missing is None:
                return
            raise DeliveryError(f"{self.name}: {response.status} without {missing}",
                                permanent=False)
        self._raise_for_status(response, self.error_code(response), self.retry_after(response))

    def _post_json(self, url: str, payload: dict, timeout: float,
                   headers: dict | None = None) -> HttpResponse:
        """POST JSON within a total deadline of `timeout` seconds, never following a redirect.

        HTTP answers (3xx included) come back as responses; no answer is a DeliveryError: a
        malformed URL is permanent, a network error or the deadline transient."""
        # On urllib (httppost.py), not an HTTP library: requests' and httpx's timeouts bound each
        # connect and read, not the whole attempt, and requests follows a redirected POST, so the
        # deadline and the refused redirect would be written around one anyway; a dependency
        # for a single JSON POST buys nothing. Imported here: loading a channel's SPEC (any
        # config naming it) must not load http.client and ssl; only a send needs them.
        from market_timers.channels import httppost

        try:
            r = httppost.post(url, json.dumps(payload).encode(),
                              {"Content-Type": "application/json", "User-Agent": "market-timers",
                               **(headers or {})}, timeout)
        except httppost.PostError as e:
            raise DeliveryError(self.clean(f"{self.name}: {e}"), permanent=e.config) from None
        return HttpResponse(r.status, r.body, r.headers)

    def _raise_for_status(self, response: HttpResponse, code: str, retry_after: float | None):
        """Map an answer that is not a delivery: 3xx (never followed) and 4xx permanent, but 429
        transient with retry_after; the rest (5xx, a 2xx outside `delivered`) transient."""
        code = self.clean(code)[:200]
        if 300 <= response.status < 400:  # never followed: a POST redirected is not delivered
            raise DeliveryError(f"{self.name}: the server answered {response.status} (a redirect"
                                "); redirects are not followed, so nothing was delivered: "
                                "configure the final URL", permanent=True)
        if response.status == 429:
            raise DeliveryError(f"{self.name}: rate limited (429 {code})", permanent=False,
                                retry_after=retry_after if retry_after is not None else 60)
        if 400 <= response.status < 500:
            raise DeliveryError(f"{self.name}: rejected ({response.status} {code})",
                                permanent=True)
        raise DeliveryError(f"{self.name}: server error ({response.status} {code})",
                            permanent=False)


def retry_after_header(headers: dict) -> float | None:
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None
