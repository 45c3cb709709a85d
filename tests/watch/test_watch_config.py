"""The [watch] table: defaults, each key, and errors that name watch.<key>."""

from __future__ import annotations

import pytest

from market_timers.config.watch import WatchConfig, parse_watch, watch_of
from market_timers.schema.problems import ConfigError, Problems


def parse(raw):
    problems = Problems("t.toml")
    return parse_watch(raw, problems), problems.lines()


def test_missing_watch_table_gives_defaults_with_ping_off():
    watch, errors = parse(None)
    assert watch == WatchConfig() and errors == []
    assert watch.ping is False and watch.slack_sec == 30 and watch.ping_timeout == 5.0


def test_every_key_is_read():
    watch, errors = parse({"ping": True, "ping_credential": "hc-url", "ping_timeout": 2.5,
                           "slack_sec": 60, "calendar_max_age_days": 90})
    assert errors == []
    assert watch == WatchConfig(True, "hc-url", 2.5, 60, 90)


def test_unknown_key_is_an_error_naming_watch_dot_key():
    _, errors = parse({"interval": "1min"})
    assert errors and errors[0].startswith("t.toml: watch.interval: unknown key")


@pytest.mark.parametrize("key,value", [
    ("ping", "yes"), ("ping_timeout", 0), ("ping_timeout", 60), ("slack_sec", -1),
    ("slack_sec", 1.5), ("calendar_max_age_days", True), ("ping_credential", "a/b")])
def test_bad_value_is_an_error_naming_its_key(key, value):
    watch, errors = parse({key: value})
    assert len(errors) == 1 and f"watch.{key}:" in errors[0]
    assert getattr(watch, key) == getattr(WatchConfig(), key)


def test_a_url_given_as_credential_name_is_refused_without_echoing_it():
    _, errors = parse({"ping_credential": "https://hc-ping.com/5e3c-secret"})
    assert len(errors) == 1 and "5e3c-secret" not in errors[0]


def test_watch_of_raises_config_error_for_a_bad_raw_table():
    class Cfg:
        source = "t.toml"
        raw = {"watch": {"slack_sec": "30s"}}
        watch = None

    with pytest.raises(ConfigError):
        watch_of(Cfg())
