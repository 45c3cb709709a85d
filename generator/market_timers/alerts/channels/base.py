"""The channel interface, the delivery error and the HTTP helper the HTTP channels share.

A channel's `send(alert)` returns on confirmed delivery or raises DeliveryError saying whether
the failure is permanent (retrying gives the same error: fall back at once) or transient
(retry later, not before `retry_after` seconds when the service asked for it).
Error texts are built from our own words, the status and the service's error code, then
redacted: urllib's exception texts can embed the URL, and the Telegram URL holds the token.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from market_timers.alerts.credentials import read_credential, redact


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

    def send(self, alert) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def clean(self, text: str) -> str:
        return redact(text, self._secrets)

    def post_json(self, url: str, payload: dict, timeout: float) -> HttpResponse:
        """POST JSON; HTTP errors come back as responses, network errors as transient errors."""
        try:
            request = urllib.request.Request(
                url, data=json.dumps(payload).encode(), method="POST",
                headers={"Content-Type": "application/json", "User-Agent": "market-timers"})
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                return HttpResponse(response.status, _read(response), dict(response.headers))
        except urllib.error.HTTPError as e:
            return HttpResponse(e.code, _read(e), dict(e.headers or {}))
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, str):  # "unknown url type: ...": a config error, text unsafe
                raise DeliveryError(f"{self.name}: the configured URL is malformed or its scheme "
                                    "unsupported", permanent=True) from None
            what = type(reason).__name__
            errno = getattr(reason, "errno", None)
            raise DeliveryError(self.clean(f"{self.name}: network error {what}"
                                           + (f" (errno {errno})" if errno else "")),
                                permanent=False) from None
        except ValueError:  # malformed URL: the message would contain it, so do not keep it
            raise DeliveryError(f"{self.name}: the configured URL is malformed",
                                permanent=True) from None

    def raise_for_status(self, response: HttpResponse, code: str, retry_after: float | None):
        """Map a non-2xx response: 429 -> transient with retry_after, other 4xx -> permanent."""
        code = self.clean(code)[:200]
        if response.status == 429:
            raise DeliveryError(f"{self.name}: rate limited (429 {code})", permanent=False,
                                retry_after=retry_after if retry_after is not None else 60)
        if 400 <= response.status < 500:
            raise DeliveryError(f"{self.name}: rejected ({response.status} {code})",
                                permanent=True)
        raise DeliveryError(f"{self.name}: server error ({response.status} {code})",
                            permanent=False)


def _read(response) -> str:
    try:
        return response.read(65536).decode("utf-8", "replace")
    except Exception:  # a body we cannot read changes nothing about the status
        return ""


def retry_after_header(headers: dict) -> float | None:
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None
