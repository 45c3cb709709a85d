"""The `[alerts]` table of the config: routes, timings, fallback and per-channel non-secret settings.

Secrets are never here: each channel names the systemd credential that holds its secret
(`token_credential`, `webhook_credential`, `password_credential`, `url_credential`).
Every problem is collected into `Problems` with its key path (`alerts.telegram.chat_id`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from market_timers.errors import Problems

SEVERITIES = ("critical", "warning", "info")
CHANNELS = ("telegram", "slack", "email", "webhook")
DIGEST = "digest"  # pseudo-channel: collected for the session's email digest, never sent at once
KINDS = (
    "failed", "killed", "watchdog", "timeout", "stale-start", "overlap-skipped", "runner-error",
    "missed", "not-scheduled", "calendar-changed", "recovery", "already-ran",
)
# "job" = the job's own severity (MARKET_SEVERITY, default critical). A fixed severity is capped at
# the job's severity: a kind can lower a job's alerts, never raise them.
DEFAULT_KIND_SEVERITY = {
    "failed": "job", "killed": "job", "watchdog": "job", "timeout": "job", "stale-start": "job",
    "runner-error": "job", "missed": "job", "not-scheduled": "job", "overlap-skipped": "warning",
    "calendar-changed": "warning", "already-ran": "warning",
}
DEFAULT_ROUTES = {"critical": "telegram", "warning": "slack", "info": DIGEST}


@dataclass
class TelegramConfig:
    chat_id: str = ""
    api_base: str = "https://api.telegram.org"
    token_credential: str = "market-timers.telegram-token"
    timeout: float = 10.0


@dataclass
class SlackConfig:
    webhook_credential: str = "market-timers.slack-webhook"
    timeout: float = 10.0


@dataclass
class EmailConfig:
    host: str = "localhost"
    port: int = 25
    starttls: bool = False
    username: str = ""
    password_credential: str = "market-timers.smtp-password"
    sender: str = ""
    to: list[str] = field(default_factory=list)
    tls_ca_file: str = ""  # extra CA to trust for STARTTLS (a private relay); verification stays on
    timeout: float = 10.0


@dataclass
class WebhookConfig:
    url_credential: str = "market-timers.webhook-url"
    timeout: float = 10.0


@dataclass
class AlertsConfig:
    enabled: bool = False  # False when the config has no [alerts] table: handlers only keep state
    routes: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ROUTES))
    explicit_routes: bool = False
    fallback: list[str] = field(default_factory=lambda: ["telegram", "slack", "email", "webhook"])
    dedup_minutes: float = 30
    repeat_minutes: float = 15  # critical alerts repeat until ack or recovery; 0 disables
    escalate_after: int = 3  # repeats before the escalation channel is added; 0 disables
    escalation_channel: str = ""
    fallback_after_attempts: int = 3  # K: failed attempts on one channel before the next one
    fallback_after_minutes: float = 10  # T: minutes on one channel before the next one
    digest_offset_minutes: float = 30  # after the session close
    journal_lines: int = 20
    kind_severity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_KIND_SEVERITY))
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> kind -> severity|off
    telegram: TelegramConfig | None = None
    slack: SlackConfig | None = None
    email: EmailConfig | None = None
    webhook: WebhookConfig | None = None

    def configured(self) -> list[str]:
        return [name for name in CHANNELS if getattr(self, name) is not None]


_CHANNEL_TYPES = {"telegram": TelegramConfig, "slack": SlackConfig, "email": EmailConfig,
                  "webhook": WebhookConfig}
_TOP_KEYS = {"routes", "fallback", "dedup_minutes", "repeat_minutes", "escalate_after",
             "escalation_channel", "fallback_after_attempts", "fallback_after_minutes",
             "digest_offset_minutes", "journal_lines", "kind_severity", "overrides", *CHANNELS}
_FIELD_KEY = {"sender": "from"}  # TOML key differs where the Python name is a keyword


def _number(problems: Problems, path: str, value: object, *, integer: bool = False,
            minimum: float = 0) -> float | None:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or value < minimum:
        kind = "an integer" if integer else "a number"
        problems.add(path, f"must be {kind} >= {minimum:g}", value)
        return None
    return value


def _channel(name: str, raw: object, problems: Problems):
    cls = _CHANNEL_TYPES[name]
    path = f"alerts.{name}"
    if not isinstance(raw, dict):
        problems.add(path, "must be a table", raw)
        return None
    obj = cls()
    keys = {_FIELD_KEY.get(f, f): f for f in obj.__dataclass_fields__}
    for key, value in raw.items():
        if key not in keys:
            problems.add(f"{path}.{key}", f"unknown key (known: {', '.join(sorted(keys))})")
            continue
        attr = keys[key]
        default = getattr(obj, attr)
        if isinstance(default, bool):
            good = isinstance(value, bool)
        elif isinstance(default, float):
            good = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        elif isinstance(default, int):
            good = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536
        elif isinstance(default, list):
            good = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        else:
            good = isinstance(value, str | int) and not isinstance(value, bool)
            value = str(value)
        if not good:
            problems.add(f"{path}.{key}", f"wrong type or range for {key}", value)
            continue
        setattr(obj, attr, value)
    if name == "telegram" and not obj.chat_id:
        problems.add(f"{path}.chat_id", "is required for the telegram channel")
    if name == "email":
        if not obj.sender:
            problems.add(f"{path}.from", "is required for the email channel")
        if not obj.to:
            problems.add(f"{path}.to", "needs at least one recipient")
    return obj


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
    if not isinstance(raw, dict):
        problems.add("alerts", "must be a table", raw)
        return cfg
    cfg.enabled = True
    for key in raw:
        if key not in _TOP_KEYS:
            problems.add(f"alerts.{key}", f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    for name in CHANNELS:
        if name in raw:
            setattr(cfg, name, _channel(name, raw[name], problems))
    configured = set(cfg.configured())

    routes = raw.get("routes", {})
    if not isinstance(routes, dict):
        problems.add("alerts.routes", "must be a table", routes)
        routes = {}
    for sev, channel in routes.items():
        if sev not in SEVERITIES:
            problems.add(f"alerts.routes.{sev}", f"unknown severity (known: {', '.join(SEVERITIES)})")
        elif channel != DIGEST and channel not in configured:
            problems.add(f"alerts.routes.{sev}",
                         f"channel is not configured (add [alerts.{channel}])", channel)
        else:
            cfg.routes[sev] = channel
            cfg.explicit_routes = True

    fallback = raw.get("fallback", cfg.fallback)
    if not isinstance(fallback, list) or not all(c in CHANNELS for c in fallback):
        problems.add("alerts.fallback", f"must be a list of {', '.join(CHANNELS)}", fallback)
    else:
        cfg.fallback = list(fallback)

    numbers = {"dedup_minutes": False, "repeat_minutes": False, "escalate_after": True,
               "fallback_after_attempts": True, "fallback_after_minutes": False,
               "digest_offset_minutes": False, "journal_lines": True}
    for key, integer in numbers.items():
        if key in raw:
            minimum = 1 if key == "fallback_after_attempts" else 0
            value = _number(problems, f"alerts.{key}", raw[key], integer=integer, minimum=minimum)
            if value is not None:
                setattr(cfg, key, value)

    esc = raw.get("escalation_channel", "")
    if esc and esc not in configured:
        problems.add("alerts.escalation_channel", "channel is not configured", esc)
    elif isinstance(esc, str):
        cfg.escalation_channel = esc

    if "kind_severity" in raw:
        cfg.kind_severity.update(_severity_map(raw["kind_severity"], "alerts.kind_severity",
                                               problems, (*SEVERITIES, "job", "off")))
    overrides = raw.get("overrides", {})
    if not isinstance(overrides, dict):
        problems.add("alerts.overrides", "must be a table of job tables", overrides)
        overrides = {}
    for job, table in overrides.items():
        cfg.overrides[job] = _severity_map(table, f"alerts.overrides.{job}", problems,
                                           (*SEVERITIES, "off"))
    return cfg


def route_warnings(cfg: AlertsConfig | None) -> list[str]:
    """What the [alerts] table routes somewhere it did not say: a default route to a channel that
    is not configured falls back along `fallback` (an explicit one is a config error)."""
    if cfg is None or not cfg.enabled:
        return []
    configured = cfg.configured()
    if not configured:
        return ["alerts: no channel is configured ([alerts.telegram], [alerts.slack], "
                "[alerts.email] or [alerts.webhook]): no alert is sent, they are only recorded "
                "for `market-timers status` and the digest"]
    from market_timers.alerts.router import chain_for

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
    import sys

    for line in route_warnings(getattr(config, "alerts", None)):
        print(f"{getattr(config, 'source', '<config>')}: warning: {line}",
              file=stream or sys.stderr)
