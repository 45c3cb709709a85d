"""The external heartbeat: a loopback HTTP server stands in for healthchecks.io."""

from __future__ import annotations

import http.server
import logging
import socket
import threading

import pytest

from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman

from .conftest import THANKSGIVING_CONFIG, utc

PING_CONFIG = THANKSGIVING_CONFIG + "\n[watch]\nping = true\nping_timeout = 2\n"


class Monitor:
    def __init__(self):
        self.requests: list[tuple[str, str, bytes]] = []
        monitor = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                monitor.requests.append(("POST", self.path, self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/ping/5e3c-secret-uuid"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def monitor():
    m = Monitor()
    yield m
    m.close()


@pytest.fixture
def pinged_week(make_config, fake_systemctl, tmp_path):
    config = make_config(PING_CONFIG)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    creds = tmp_path / "creds"
    creds.mkdir()
    return config, creds


def run(config, systemctl, alerts, creds, now):
    systemctl.now = now
    return deadman.run_pass(config, now, systemctl=systemctl, alert=alerts,
                            env={"MARKET_TIMERS_CREDENTIALS_DIRECTORY": str(creds)})


def test_clean_pass_pings_the_success_url(pinged_week, fake_systemctl, alerts, monitor):
    config, creds = pinged_week
    (creds / "market-timers.deadman-ping-url").write_text(monitor.url + "\n")
    result = run(config, fake_systemctl, alerts, creds, utc("2025-11-24T12:00:00Z"))
    assert result.ping == "ok" and result.ping_delivered is True
    assert [(m, p) for m, p, _ in monitor.requests] == [("POST", "/ping/5e3c-secret-uuid")]


def test_missed_run_pings_the_fail_url_then_success_again(pinged_week, fake_systemctl, alerts,
                                                          monitor):
    config, creds = pinged_week
    (creds / "market-timers.deadman-ping-url").write_text(monitor.url)
    run(config, fake_systemctl, alerts, creds, utc("2025-11-24T22:00:00Z"))  # no run record
    run(config, fake_systemctl, alerts, creds, utc("2025-11-24T22:01:00Z"))  # already reported
    paths = [p for _, p, _ in monitor.requests]
    assert paths == ["/ping/5e3c-secret-uuid/fail", "/ping/5e3c-secret-uuid"]
    assert b"missed: signal 2025-11-24" in monitor.requests[0][2]


def test_dead_ping_url_does_not_break_the_pass_nor_log_the_url(pinged_week, fake_systemctl,
                                                              alerts, caplog):
    config, creds = pinged_week
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/ping/5e3c-secret-uuid"
    (creds / "market-timers.deadman-ping-url").write_text(dead)
    runrecord.update(config.state_dir, "signal", "2025-11-24", started_utc="x")
    with caplog.at_level(logging.WARNING, logger="market_timers"):
        result = run(config, fake_systemctl, alerts, creds, utc("2025-11-25T12:00:00Z"))
    assert result.ping_delivered is False and result.findings == []
    assert "heartbeat ping failed" in caplog.text
    assert "5e3c-secret-uuid" not in caplog.text


def test_ping_off_by_default_sends_nothing(make_config, fake_systemctl, alerts, monitor, tmp_path):
    config = make_config()
    sync_mod.sync(config, now=utc("2025-11-21T22:00:00Z"), systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "market-timers.deadman-ping-url").write_text(monitor.url)
    result = run(config, fake_systemctl, alerts, creds, utc("2025-11-24T12:00:00Z"))
    assert result.ping is None and monitor.requests == []


def test_ping_on_without_credential_is_a_pass_error_not_a_crash(pinged_week, fake_systemctl,
                                                               alerts):
    config, creds = pinged_week
    result = run(config, fake_systemctl, alerts, creds, utc("2025-11-24T12:00:00Z"))
    assert result.ping is None and any("credential" in e for e in result.errors)


@pytest.mark.parametrize("bad", ["\x07", "\n", " ", "\x7f"])
def test_ping_url_with_a_control_character_is_never_logged(pinged_week, fake_systemctl, alerts,
                                                           monitor, caplog, bad):
    """The exception text (InvalidURL "...can't contain control characters...") held the URL."""
    config, creds = pinged_week
    (creds / "market-timers.deadman-ping-url").write_text(
        monitor.url.replace("secret", f"sec{bad}ret"))
    runrecord.update(config.state_dir, "signal", "2025-11-24", started_utc="x")
    with caplog.at_level(logging.DEBUG, logger="market_timers"):
        result = run(config, fake_systemctl, alerts, creds, utc("2025-11-25T12:00:00Z"))
    assert result.ping_delivered is False
    assert "heartbeat ping failed" in caplog.text
    assert "5e3c" not in caplog.text and "uuid" not in caplog.text
    assert monitor.requests == []


def test_ping_answered_by_a_redirect_is_not_a_ping(pinged_week, fake_systemctl, alerts, caplog):
    from tests.fakes.misbehaving import RedirectServer

    config, creds = pinged_week
    runrecord.update(config.state_dir, "signal", "2025-11-24", started_utc="x")
    with RedirectServer(302) as server:
        (creds / "market-timers.deadman-ping-url").write_text(server.url + "/ping/5e3c")
        with caplog.at_level(logging.WARNING, logger="market_timers"):
            result = run(config, fake_systemctl, alerts, creds, utc("2025-11-25T12:00:00Z"))
        assert server.requests == [("POST", "/ping/5e3c")]
    assert result.ping_delivered is False
    assert "HTTP 302" in caplog.text


def test_a_failed_unit_of_the_package_pings_fail_at_every_pass_until_it_recovers(
        pinged_week, fake_systemctl, alerts, monitor):
    config, creds = pinged_week
    (creds / "market-timers.deadman-ping-url").write_text(monitor.url + "\n")
    fake_systemctl.failed = {"market-events.service"}
    for minute in ("12:00", "12:01"):
        result = run(config, fake_systemctl, alerts, creds, utc(f"2025-11-24T{minute}:00Z"))
        assert result.ping == "fail", minute
        assert result.errors == [] and result.new == []  # the pass itself did its job
    assert [p for _, p, _ in monitor.requests] == ["/ping/5e3c-secret-uuid/fail"] * 2
    assert b"not working: failed: market-events.service" in monitor.requests[-1][2]
    fake_systemctl.failed = set()
    assert run(config, fake_systemctl, alerts, creds, utc("2025-11-24T12:02:00Z")).ping == "ok"


def test_an_alert_undeliverable_on_every_channel_pings_fail(pinged_week, fake_systemctl, alerts,
                                                             monitor):
    from market_timers.alerts.model import UNDELIVERABLE, Alert
    from market_timers.alerts.outbox import Outbox

    config, creds = pinged_week
    (creds / "market-timers.deadman-ping-url").write_text(monitor.url + "\n")
    stuck = Alert(id="2025-0a0b0c0d", kind="failed", severity="critical", key="k", job="close",
                  session="2025-11-24", title="close failed", text="x", chain=["telegram"],
                  created="2025-11-24T11:00:00Z", state=UNDELIVERABLE)
    Outbox(config.spool_dir).put(stuck)
    result = run(config, fake_systemctl, alerts, creds, utc("2025-11-24T12:00:00Z"))
    assert result.ping == "fail"
    assert result.unhealthy == ["1 alert(s) undeliverable on every channel (first: close failed)"]
    assert monitor.requests[-1][1].endswith("/fail")
