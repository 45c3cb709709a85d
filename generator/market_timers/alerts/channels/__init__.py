"""One module per channel behind one small interface (channels/base.py)."""

from __future__ import annotations

from market_timers.alerts.channels.base import Channel, DeliveryError


def make_channel(name: str, alerts_config, env: dict | None = None) -> Channel:
    """The channel `name` built from its [alerts.<name>] settings; secrets are read lazily."""
    settings = getattr(alerts_config, name, None)
    if settings is None:
        raise DeliveryError(f"channel {name} is not configured", permanent=True)
    if name == "telegram":
        from market_timers.alerts.channels.telegram import TelegramChannel as cls
    elif name == "slack":
        from market_timers.alerts.channels.slack import SlackChannel as cls
    elif name == "email":
        from market_timers.alerts.channels.email import EmailChannel as cls
    elif name == "webhook":
        from market_timers.alerts.channels.webhook import WebhookChannel as cls
    else:
        raise DeliveryError(f"unknown channel {name}", permanent=True)
    return cls(settings, env=env)


__all__ = ["Channel", "DeliveryError", "make_channel"]
