"""The `[watch]` table: settings of the dead-man check, its external heartbeat and the refresh.

    [watch]
    ping = false                                  # heartbeat to an external monitor (off by default)
    ping_credential = "market-timers.deadman-ping-url"   # systemd credential holding the URL
    ping_timeout = 5                              # seconds; a slow monitor never holds the pass
    slack_sec = 30                                # extra seconds after grace + timeout before "missed"
    calendar_max_age_days = 365                   # warn when exchange_calendars is older; 0 = off
    calendar_warn_days = 45                       # warn when a calendar's data ends this soon; 0 = off

The ping URL is a secret (anyone holding it can mark the check up), so it never appears in the
config, only its credential's name. Every problem names its key, e.g. `watch.slack_sec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from market_timers.schema.problems import Problems, table_of
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import flag, whole

DEFAULT_PING_CREDENTIAL = "market-timers.deadman-ping-url"


@dataclass(frozen=True)
class WatchConfig:
    ping: bool = False
    ping_credential: str = DEFAULT_PING_CREDENTIAL
    ping_timeout: float = 5.0
    slack_sec: int = 30
    calendar_max_age_days: int = 365
    calendar_warn_days: int = 45


def _ping_credential(name: object) -> str:
    if isinstance(name, str) and name and "/" not in name and name not in (".", ".."):
        return name
    raise Bad("must be a credential name (a file name in $CREDENTIALS_DIRECTORY, no '/'), not "
              "the URL itself", shown=_hide(name))


def _ping_timeout(value: object) -> float:
    if _number(value) and 0 < value <= 30:
        return float(value)
    raise Bad("must be a number of seconds, more than 0 and at most 30 (a slow monitor must not "
              "hold up the dead-man pass)")


TABLE = Table((
    Key("ping", flag, False, "heartbeat to an external monitor"),
    Key("ping_credential", _ping_credential, DEFAULT_PING_CREDENTIAL,
        "the systemd credential holding the heartbeat URL"),
    Key("ping_timeout", _ping_timeout, 5.0, "seconds the heartbeat may take"),
    Key("slack_sec", whole(0, 3600), 30, 'extra seconds after grace + timeout before "missed"'),
    Key("calendar_max_age_days", whole(0, 3650), 365,
        "warn when exchange_calendars is older; 0 = off"),
    Key("calendar_warn_days", whole(0, 366), 45,
        "warn when a calendar's data ends this soon; 0 = off"),
), not_table="must be a table ([watch])")
KEYS = TABLE.names


def parse_watch(raw: dict | None, problems: Problems) -> WatchConfig:
    """Validate `[watch]`; problems are added (not raised), defaults kept for the bad keys."""
    if raw is None:
        return WatchConfig()
    values = TABLE.parse(raw, "watch", problems)
    return WatchConfig() if values is None else WatchConfig(**values)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _hide(value: object) -> object:
    """A URL put where a credential name belongs is a secret: do not echo it in the error."""
    if isinstance(value, str) and "://" in value:
        return "<a URL, not shown>"
    return value


def watch_of(config) -> WatchConfig:
    """The config's WatchConfig; parses `raw["watch"]` if config.parse has not done it yet."""
    return table_of(config, "watch", WatchConfig, parse_watch)
