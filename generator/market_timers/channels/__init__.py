"""The channel registry: one module per channel, found by name (channels/<name>.py, its SPEC).

Adding a channel is its module plus its name in NAMES (contracts/channelnames.py; tests and docs follow; tests/project/test_docs.py
fails until the man page describes it). NAMES is also the default `fallback` order. Modules are
imported on first use, so a command touches only the channels its config names. An HTTP channel
subclasses base.HttpChannel and sends through its `send_json`, the one send path.
"""

from __future__ import annotations

import importlib

from market_timers.channels.base import Channel, DeliveryError
from market_timers.channels.spec import ChannelSpec
from market_timers.contracts.channelnames import NAMES


def lookup(name: str) -> ChannelSpec:
    if name not in NAMES:
        raise KeyError(name)
    found = importlib.import_module(f"{__name__}.{name}").SPEC
    assert found.name == name, f"channels/{name}.py declares {found.name}"
    return found


def specs() -> list[ChannelSpec]:
    return [lookup(name) for name in NAMES]


def make_channel(name: str, alerts_config, env: dict | None = None) -> Channel:
    """The channel `name` built from its [alerts.<name>] settings; secrets are read lazily."""
    if name not in NAMES:
        raise DeliveryError(f"unknown channel {name}", permanent=True)
    settings = getattr(alerts_config, name, None)
    if settings is None:
        raise DeliveryError(f"channel {name} is not configured", permanent=True)
    return lookup(name).channel(settings, env=env)


__all__ = ["NAMES", "Channel", "ChannelSpec", "DeliveryError", "lookup", "make_channel", "specs"]
