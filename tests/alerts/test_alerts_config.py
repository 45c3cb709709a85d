"""The [alerts] table: defaults, every problem reported with its key path, severity rules."""

from __future__ import annotations

import tomllib

from market_timers.alerts.router import chain_for, effective_severity
from market_timers.config.alerts import parse_alerts
from market_timers.schema.problems import Problems

FULL = """
[alerts]
dedup_minutes = 20
repeat_minutes = 10
escalate_after = 2
escalation_channel = "email"
fallback = ["telegram", "email", "slack"]
fallback_after_attempts = 4
fallback_after_minutes = 6
digest_offset_minutes = 45

[alerts.routes]
critical = "telegram"
warning = "slack"
info = "digest"

[alerts.kind_severity]
stale-start = "warning"
missed = "critical"

[alerts.overrides.noisy-job]
failed = "info"
overlap-skipped = "off"

[alerts.telegram]
chat_id = -1001234567890
api_base = "http://127.0.0.1:8999"

[alerts.slack]

[alerts.email]
host = "smtp.example.org"
port = 587
starttls = true
username = "alerts@example.org"
from = "market-timers@example.org"
to = ["ops@example.org"]

[alerts.webhook]
url_credential = "market-timers.webhook-url"
"""


def parse(text: str):
    problems = Problems("test.toml")
    cfg = parse_alerts(tomllib.loads(text).get("alerts"), problems)
    return cfg, problems.lines()


def test_full_example_parses_without_problems():
    cfg, lines = parse(FULL)
    assert lines == []
    assert cfg.enabled and cfg.configured() == ["telegram", "slack", "email", "webhook"]
    assert cfg.telegram.chat_id == "-1001234567890"
    assert cfg.email.sender == "market-timers@example.org" and cfg.email.port == 587
    assert (cfg.dedup_minutes, cfg.repeat_minutes, cfg.escalate_after) == (20, 10, 2)
    assert chain_for(cfg, "critical") == ["telegram", "email", "slack"]
    assert chain_for(cfg, "info") == []


def test_no_alerts_table_means_disabled_with_defaults():
    cfg, lines = parse("calendar = 'XNYS'\n")
    assert lines == [] and not cfg.enabled
    assert cfg.routes == {"critical": "telegram", "warning": "slack", "info": "digest"}
    assert (cfg.dedup_minutes, cfg.repeat_minutes) == (30, 15)


def test_every_problem_is_reported_with_its_key_path():
    _, lines = parse("""
[alerts]
dedup_minute = 5
repeat_minutes = -1
fallback = ["telegram", "pager"]
[alerts.routes]
critical = "webhook"
urgent = "telegram"
[alerts.kind_severity]
exploded = "critical"
failed = "loud"
[alerts.telegram]
api_base = "http://127.0.0.1:1"
token = "do-not-put-it-here"
[alerts.email]
port = 70000
""")
    text = "\n".join(lines)
    for path in ("alerts.dedup_minute: unknown key", "alerts.repeat_minutes: must be",
                 "alerts.fallback: must be a list", "alerts.routes.critical: channel is not configured",
                 "alerts.routes.urgent: unknown severity", "alerts.kind_severity.exploded: unknown",
                 "alerts.kind_severity.failed: must be one of", "alerts.telegram.chat_id: is required",
                 "alerts.telegram.token: unknown key", "alerts.email.port: wrong type",
                 "alerts.email.from: is required", "alerts.email.to: needs"):
        assert f"test.toml: {path}" in text, path
    assert all(line.startswith("test.toml: alerts.") for line in lines)


def test_default_route_to_an_unconfigured_channel_uses_the_configured_ones():
    cfg, lines = parse("[alerts.telegram]\nchat_id = '1'\n")
    assert lines == []
    assert chain_for(cfg, "warning") == ["telegram"]  # slack is not configured


def test_severity_rules_job_kind_and_override():
    cfg, _ = parse(FULL)
    assert effective_severity(cfg, "failed", "j", "critical") == "critical"
    assert effective_severity(cfg, "failed", "j", "warning") == "warning"
    assert effective_severity(cfg, "stale-start", "j", "critical") == "warning"
    assert effective_severity(cfg, "overlap-skipped", "j", "info") == "info"  # capped by the job
    assert effective_severity(cfg, "failed", "noisy-job", "critical") == "info"
    assert effective_severity(cfg, "overlap-skipped", "noisy-job", "critical") is None
    assert effective_severity(cfg, "calendar-changed") == "warning"
    assert effective_severity(cfg, "missed", "j", None) == "critical"


def test_a_default_route_to_an_unconfigured_channel_is_a_warning(tmp_path, capsys):
    """[alerts.slack] only: critical alerts default to telegram and silently fell back."""
    from market_timers.cli import main
    from market_timers.config.alerts import route_warnings

    problems = Problems()
    cfg = parse_alerts({"slack": {}}, problems)
    assert not problems
    [line] = route_warnings(cfg)
    assert "alerts.routes.critical" in line and "telegram is not configured" in line
    assert "go to slack instead" in line
    assert route_warnings(parse_alerts({}, Problems()))[0].startswith("alerts: no channel")
    both = parse_alerts({"slack": {}, "telegram": {"chat_id": "1"}}, Problems())
    assert route_warnings(both) == []

    path = tmp_path / "c.toml"
    path.write_text('calendar = "XNYS"\n[alerts.slack]\n')
    assert main(["--config", str(path), "--now", "2026-11-30T12:00:00Z", "plan"]) == 0
    assert "warning: alerts.routes.critical" in capsys.readouterr().err


def test_an_explicit_route_to_an_unconfigured_channel_is_an_error():
    problems = Problems()
    parse_alerts({"slack": {}, "routes": {"critical": "telegram"}}, problems)
    assert any(p.path == "alerts.routes.critical" for p in problems.items)
