"""The `[alerts]` table of the config: routes, timings, fallback and per-channel non-secret settings.

The channels' own tables (`[alerts.<name>]`) are declared by the channel modules and checked by
their specs (channels/spec.py, channels/__init__.py): the names, keys, checks and credential
names all come from the registry. Secrets are never here: each channel names the systemd
credential that holds its secret (`token_credential`, `webhook_credential`...).
Every problem is collected into `Problems` with its key path (`alerts.telegram.chat_id`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from market_timers.channels import NAMES
from market_timers.channels import lookup as channel_spec
from market_timers.contracts.outcomes import ALERT_KINDS, DEFAULT_SEVERITY
from market_timers.contracts.severities import SEVERITIES
from market_timers.schema.problems import Problems
from market_timers.schema.table import Bad, Key, Table

CHANNELS = NAMES
DIGEST = "digest"  # pseudo-channel: collected for the session's email digest, never sent at once
KINDS = ALERT_KINDS  # the outcome table's alert kinds, and not-scheduled, calendar-changed, recovery
# "job" = the job's own severity (MARKET_SEVERITY, default critical). A fixed severity is capped at
# the job's severity: a kind can lower a job's alerts, never raise them.
DEFAULT_KIND_SEVERITY = DEFAULT_SEVERITY
DEFAULT_ROUTES = {"critical": "telegram", "warning": "slack", "info": DIGEST}


@dataclass
class AlertsConfig:
    enabled: bool = False  # False when the config has no [alerts] table: handlers only keep state
    routes: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ROUTES))
    fallback: list[str] = field(default_factory=lambda: list(CHANNELS))
    dedup_minutes: float = 30
    repeat_minutes: float = 15  # critical alerts repeat until ack or recovery; 0 disables
    escalate_after: int = 3  # repeats before the escalation channel is added; 0 disables
    escalation_channel: str = ""
    fallback_after_attempts: int = 3  # K: failed attempts on one channel before the next one
    fallback_after_minutes: float = 10  # T: minutes on one channel before the next one
    # The longest a channel's back-off (a 429's Retry-After, a stored not-before) is obeyed: a
    # not-before further away is cut to now + this, so no answer or file silences a channel.
    max_backoff_minutes: float = 60
    digest_offset_minutes: float = 30  # after the session close
    journal_lines: int = 20
    kind_severity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_KIND_SEVERITY))
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> kind -> severity|off
    channels: dict[str, object] = field(default_factory=dict)  # name -> its settings object

    def __getattr__(self, name: str):
        """`cfg.telegram`: the channel's settings, or None when it has no [alerts.<name>]."""
        if name in CHANNELS:
            return self.__dict__.get("channels", {}).get(name)
        raise AttributeError(name)

    def configured(self) -> list[str]:
        return [name for name in CHANNELS if name in self.channels]

    def credential_owners(self) -> dict[str, str]:
        """Each credential the configured channels read -> its channel."""
        return {cred: name for name in self.configured()
                for cred in channel_spec(name).credential_names(self.channels[name])}

    def credential_names(self) -> list[str]:
        """The credentials the configured channels read (config renames applied)."""
        return [cred for name in self.configured()
                for cred in channel_spec(name).credential_names(self.channels[name])]



def _number(*, integer: bool = False, minimum: float = 0):
    def check(value: object) -> float:
        ok = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok or value < minimum:
            raise Bad(f"must be {'an integer' if integer else 'a number'} >= {minimum:g}")
        return value
    return check


def _fallback(value: object) -> list[str]:
    if not isinstance(value, list) or not all(c in CHANNELS for c in value):
        raise Bad(f"must be a list of {', '.join(CHANNELS)}")
    return list(value)


TABLE = Table((
    Key("routes", None, {}, "where each severity goes: a configured channel or digest"),
    Key("fallback", _fallback, list(CHANNELS), "the channels tried next, in order"),
    Key("dedup_minutes", _number(), 30, "minutes an identical alert is not sent again"),
    Key("repeat_minutes", _number(), 15, "critical alerts repeat until ack or recovery; 0: never"),
    Key("escalate_after", _number(integer=True), 3,
        "repeats before the escalation channel is added; 0: never"),
    Key("fallback_after_attempts", _number(integer=True, minimum=1), 3,
        "failed attempts on one channel before the next one"),
    Key("fallback_after_minutes", _number(), 10, "minutes on one channel before the next one"),
    Key("max_backoff_minutes", _number(minimum=1), 60,
        "the longest a channel's back-off (Retry-After, 429) is obeyed, in minutes"),
    Key("digest_offset_minutes", _number(), 30, "minutes after the close the digest is sent"),
    Key("journal_lines", _number(integer=True), 20, "lines of the journal in an alert"),
    Key("escalation_channel", None, "", "the channel added to repeated critical alerts"),
    Key("kind_severity", None, None, "the severity of each alert kind (a table kind = severity)"),
    Key("overrides", None, {}, "per-job exceptions (a table job = { kind = severity })"),
), dynamic=CHANNELS)
ROUTES = Table(tuple(Key(sev, None, DEFAULT_ROUTES[sev], f"where {sev} alerts go")
                     for sev in SEVERITIES), sort_known=False, kind="severity")


def _severity_map(raw: object, path: str, problems: Problems, allowed: tuple[str, ...]) -> dict:
    if not isinstance(raw, dict):
        problems.add(path, "must be a table", raw)
        return {}
    out = {}
    for kind, sev in raw.items():
        if kind not in KINDS or kind == "recovery":
            problems.add(f"{path}.{kind}", "unknown alert kind", kind)
        elif sev not in allowed:
            problems.add(f"{path}.{kind}", f"must be one of {', '.join(allowed)}", sev)
        else:
            out[kind] = sev
    return out


def parse_alerts(raw: dict | None, problems: Problems) -> AlertsConfig:
    """Validate the `[alerts]` table; every problem is added to `problems` with its key path."""
    cfg = AlertsConfig()
    if raw is None:
        return cfg
    if not TABLE.is_table(raw, "alerts", problems):
        return cfg
    cfg.enabled = True
    TABLE.unknown(raw, "alerts", problems)
    for name in CHANNELS:
        if name in raw:
            settings = channel_spec(name).parse(raw[name], problems)
            if settings is not None:
                cfg.channels[name] = settings
    configured = set(cfg.configured())
    values = TABLE.values(raw, "alerts", problems)
    _routes(values["routes"], cfg, configured, problems)
    cfg.fallback = list(values["fallback"])
    for key in ("dedup_minutes", "repeat_minutes", "escalate_after", "fallback_after_attempts",
                "fallback_after_minutes", "max_backoff_minutes", "digest_offset_minutes",
                "journal_lines"):
        setattr(cfg, key, values[key])
    esc = values["escalation_channel"]
    if esc and esc not in configured:
        problems.add("alerts.escalation_channel", "channel is not configured", esc)
    elif isinstance(esc, str):
        cfg.escalation_channel = esc
    _severities(values, cfg, problems)
    return cfg


def _routes(routes: object, cfg: AlertsConfig, configured: set[str], problems: Problems) -> None:
    """`routes`: severity -> a configured channel or digest."""
    values = ROUTES.parse(routes, "alerts.routes", problems)
    if values is None:
        return
    for sev in ROUTES.names:
        if sev not in routes:
            continue
        channel = values[sev]
        if channel != DIGEST and channel not in configured:
            problems.add(f"alerts.routes.{sev}",
                         f"channel is not configured (add [alerts.{channel}])", channel)
        else:
            cfg.routes[sev] = channel


def _severities(values: dict, cfg: AlertsConfig, problems: Problems) -> None:
    """`kind_severity` (kind -> severity) and `overrides` (job -> kind -> severity)."""
    if values["kind_severity"] is not None:
        cfg.kind_severity.update(_severity_map(values["kind_severity"], "alerts.kind_severity",
                                               problems, (*SEVERITIES, "job", "off")))
    overrides = values["overrides"]
    if not isinstance(overrides, dict):
        problems.add("alerts.overrides", "must be a table of job tables", overrides)
        overrides = {}
    for job, table in overrides.items():
        cfg.overrides[job] = _severity_map(table, f"alerts.overrides.{job}", problems,
                                           (*SEVERITIES, "off"))


def chain_for(cfg: AlertsConfig, severity: str) -> list[str]:
    """Channels to try in order; [] means the digest (or nothing configured at all)."""
    first = cfg.routes.get(severity, DIGEST)
    if first == DIGEST:
        return []
    configured = set(cfg.configured())
    chain = [first] if first in configured else []
    chain += [c for c in cfg.fallback if c in configured and c not in chain]
    return chain


def route_warnings(cfg: AlertsConfig | None) -> list[str]:
    """What the [alerts] table routes somewhere it did not say: a default route to a channel that
    is not configured falls back along `fallback` (an explicit one is a config error)."""
    if cfg is None or not cfg.enabled:
        return []
    configured = cfg.configured()
    if not configured:
        tables = ", ".join(f"[alerts.{name}]" for name in CHANNELS)
        return [f"alerts: no channel is configured (one of {tables}): no alert is sent, they "
                "are only recorded for `market-timers status` and the digest"]
    out = []
    for sev in SEVERITIES:
        first = cfg.routes.get(sev, DIGEST)
        if first == DIGEST or first in configured:
            continue
        chain = chain_for(cfg, sev)
        where = f"go to {chain[0]} instead" if chain else "are not sent at all"
        out.append(f"alerts.routes.{sev}: the default channel {first} is not configured "
                   f"([alerts.{first}]): {sev} alerts {where} (set routes.{sev} to say so)")
    return out


def print_route_warnings(config, stream=None) -> None:
    for line in route_warnings(getattr(config, "alerts", None)):
        print(f"{getattr(config, 'source', '<config>')}: warning: {line}",
              file=stream or sys.stderr)
