"""Email through a real aiosmtpd server: STARTTLS + AUTH with a self-signed certificate, a plain
relay, refused recipients, and the per-session digest."""

from __future__ import annotations

import json

import pytest
from tests.fakes.smtp import FakeSmtp, make_cert

from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.commands import alert_test, digest

S = "2026-11-30"


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_smtp(cert, creds):
    (creds / "market-timers.smtp-password").write_text("s3cret-smtp-pass\n")
    with FakeSmtp(cert=cert[0], key=cert[1], user="alerts", password="s3cret-smtp-pass") as s:
        yield s


def email_cfg(port, cert=None, **kw):
    cfg = {"host": "127.0.0.1", "port": port, "from": "market-timers@example.org",
           "to": ["ops@example.org"]}
    if cert:
        cfg.update(starttls=True, username="alerts", tls_ca_file=cert)
    cfg.update(kw)
    return cfg


def test_critical_by_email_over_starttls_with_login(make_ctx, tls_smtp, cert):
    ctx = make_ctx({"email": email_cfg(tls_smtp.port, cert[0])}, routes={"critical": "email"})
    alert = raise_alert(ctx, kind="failed", job="close-report", session=S,
                        details={"status": "3"})
    [msg] = tls_smtp.messages
    [env] = tls_smtp.envelopes
    assert env["tls"] and env["authenticated"] and env["to"] == ["ops@example.org"]
    assert msg["Subject"] == "[CRITICAL] close-report failed with exit status 3"
    assert msg["Auto-Submitted"] == "auto-generated"
    assert msg["Message-ID"] == f"<{alert.id}@market-timers>"
    assert alert.id in msg.get_body(("plain",)).get_content()
    assert ctx.outbox.load_all() == []


def test_wrong_smtp_password_is_permanent_and_kept_undeliverable(make_ctx, tls_smtp, cert, creds):
    (creds / "market-timers.smtp-password").write_text("wrong\n")
    ctx = make_ctx({"email": email_cfg(tls_smtp.port, cert[0])}, routes={"critical": "email"})
    raise_alert(ctx, kind="failed", job="j", session=S)
    [a] = ctx.outbox.load_all()
    assert a.state == "undeliverable" and "login refused (535)" in a.errors[0]
    assert tls_smtp.messages == []


def test_untrusted_certificate_is_refused_not_ignored(make_ctx, tls_smtp, cert):
    ctx = make_ctx({"email": email_cfg(tls_smtp.port, cert[0], tls_ca_file="")},
                   routes={"critical": "email"})
    raise_alert(ctx, kind="failed", job="j", session=S)
    assert tls_smtp.messages == []
    assert "certificate not trusted" in ctx.outbox.load_all()[0].errors[0]


def test_plain_relay_delivers_and_partial_refusal_is_logged(make_ctx, caplog):
    with FakeSmtp(refuse={"gone@example.org"}) as relay:
        ctx = make_ctx({"email": email_cfg(relay.port, to=["ops@example.org",
                                                           "gone@example.org"])},
                       routes={"critical": "email"})
        raise_alert(ctx, kind="failed", job="j", session=S)
        assert relay.envelopes[0]["to"] == ["ops@example.org"]
    assert "recipients refused: gone@example.org" in caplog.text
    assert ctx.outbox.load_all() == []


def test_all_recipients_refused_falls_back_to_the_next_channel(make_ctx, api):
    with FakeSmtp(refuse={"ops@example.org"}) as relay:
        raw = {"email": email_cfg(relay.port), "slack": {}}
        ctx = make_ctx(raw, routes={"critical": "email"}, fallback=["slack"])
        raise_alert(ctx, kind="failed", job="j", session=S)
        assert relay.messages == []
    [msg] = api.received("slack")
    assert "j failed" in msg["text"]


def test_digest_lists_results_durations_against_median_and_info_notices(make_ctx, api, clock,
                                                                        tmp_path, capsys):
    with FakeSmtp() as relay:
        raw = {"email": email_cfg(relay.port), "telegram": {"chat_id": "1", "api_base": api.base}}
        ctx = make_ctx(raw, kind_severity={"overlap-skipped": "info"})
        runs = tmp_path / "state" / "runs" / "open-check"
        runs.mkdir(parents=True)
        for day, secs in (("2026-11-25", 10.0), ("2026-11-26", 12.0), ("2026-11-27", 11.0)):
            (runs / f"{day}.json").write_text(json.dumps(
                {"job": "open-check", "session": day, "duration_sec": secs, "result": "success"}))
        (runs / "broken.json").write_text("{not json")
        record_success(ctx, job="open-check", session=S, details={"duration": 30.5})
        raise_alert(ctx, kind="overlap-skipped", job="rebalance", session=S)
        failed = raise_alert(ctx, kind="failed", job="close-report", session=S)
        assert digest(ctx, S) == 0
        mail = relay.messages[-1]
    body = mail.get_body(("plain",)).get_content()
    assert mail["Subject"] == f"[INFO] market-timers digest for session {S}"
    assert "open-check: ok; duration 30.5 s (median of last 3: 11.0 s)" in body
    assert "rebalance: overlap-skipped" in body
    assert "Skips: 1, stale starts: 0, misses: 0" in body
    assert f"{failed.id} critical close-report failed" in body and "delivered via telegram" in body
    assert "rebalance skipped" in body.split("Routed to this digest")[1]


def test_digest_without_email_channel_prints_it(make_ctx, capsys):
    ctx = make_ctx()
    assert digest(ctx, S) == 0
    assert f"market-timers digest for session {S}" in capsys.readouterr().out


def test_alert_test_email_reports_delivery(make_ctx, tls_smtp, cert, capsys):
    ctx = make_ctx({"email": email_cfg(tls_smtp.port, cert[0])})
    assert alert_test(ctx, "email") == 0
    assert tls_smtp.messages[0]["Subject"] == "[INFO] market-timers test message (email)"
    assert "test message delivered" in capsys.readouterr().out


def test_digest_that_cannot_be_delivered_exits_non_zero(make_ctx, capsys):
    """It printed "undeliverable" and exited 0: the digest job looked fine."""
    with FakeSmtp() as relay:
        cfg = {**email_cfg(relay.port), "username": "u"}  # its password credential is missing
        ctx = make_ctx({"email": cfg})
        assert digest(ctx, S) == 1
        assert relay.messages == []
    err = capsys.readouterr().err
    assert "undeliverable" in err and "credential" in err


@pytest.fixture
def smtps(cert, creds):
    (creds / "market-timers.smtp-password").write_text("s3cret-smtp-pass\n")
    with FakeSmtp(cert=cert[0], key=cert[1], user="alerts", password="s3cret-smtp-pass",
                  implicit_tls=True) as s:
        yield s


def test_critical_by_email_over_implicit_tls_on_an_smtps_port(make_ctx, smtps, cert):
    cfg = email_cfg(smtps.port, implicit_tls=True, username="alerts", tls_ca_file=cert[0])
    ctx = make_ctx({"email": cfg}, routes={"critical": "email"})
    raise_alert(ctx, kind="failed", job="close-report", session=S, details={"status": "3"})
    [env] = smtps.envelopes
    assert env["tls"] and env["authenticated"]
    assert ctx.outbox.load_all() == []


def test_implicit_tls_with_an_untrusted_certificate_is_refused(make_ctx, smtps, cert):
    cfg = email_cfg(smtps.port, implicit_tls=True, username="alerts")
    ctx = make_ctx({"email": cfg}, routes={"critical": "email"})
    raise_alert(ctx, kind="failed", job="j", session=S)
    assert smtps.messages == []
    assert "certificate not trusted" in ctx.outbox.load_all()[0].errors[0]


def test_starttls_and_implicit_tls_together_are_refused_naming_both():
    from market_timers.config.alerts import parse_alerts
    from market_timers.schema.problems import Problems

    problems = Problems()
    parse_alerts({"email": email_cfg(465, starttls=True, implicit_tls=True)}, problems)
    lines = problems.lines()
    assert any("alerts.email.implicit_tls" in line and "starttls" in line for line in lines), lines
