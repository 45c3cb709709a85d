"""Telegram Bot API `sendMessage`.

Response shape: `{"ok": true, "result": {...}}` or `{"ok": false, "error_code": N,
"description": "...", "parameters": {"retry_after": S}}`. 429 -> wait `retry_after`; other 4xx
are permanent (the same message gives the same error); 5xx and network errors are transient.
Text is at most 4096 characters, counted as Telegram does, in UTF-16 code units (textfit.py).
"""

from __future__ import annotations

from market_timers.channels import spec
from market_timers.channels.base import HttpChannel
from market_timers.channels.textfit import utf16_len

LIMIT = 4096


def fit(alert) -> str:
    return alert.body(excerpt_limit=LIMIT, measure=utf16_len)


class TelegramChannel(HttpChannel):
    name = "telegram"
    delivered = (200,)

    def unconfirmed(self, response):  # 200 without ok: treat as a server-side fault, retry
        return None if response.data.get("ok") is True else "ok=true"

    def error_code(self, response):
        return str(response.data.get("description") or "")

    def retry_after(self, response):
        retry = (response.data.get("parameters") or {}).get("retry_after")
        return float(retry) if isinstance(retry, int | float) else None

    def send(self, alert) -> None:
        token = self.secret(self.settings.token_credential)
        url = f"{self.settings.api_base.rstrip('/')}/bot{token}/sendMessage"
        payload = {"chat_id": self.settings.chat_id, "text": fit(alert),
                   "disable_web_page_preview": True,
                   "disable_notification": alert.severity != "critical"}
        self.send_json(url, payload)


SPEC = spec.ChannelSpec(
    name="telegram",
    summary="a Telegram Bot API sendMessage to one chat (silent below critical)",
    settings=(
        spec.text("chat_id", doc="the chat to write to", required=True),
        spec.url("api_base", "https://api.telegram.org", "the Bot API base URL"),
        spec.credential("token_credential", "market-timers.telegram-token",
                        "the credential holding the bot token"),
        spec.timeout(),
    ),
    channel=TelegramChannel, fit=fit, limit=LIMIT, measure=utf16_len,
)
