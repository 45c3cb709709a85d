"""Nothing is lost: spooled before any send, a sender killed mid-send, resend with the same id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from market_timers.alerts.api import raise_alert
from market_timers.alerts.delivery import flush

ROOT = Path(__file__).resolve().parents[2]


def test_alert_is_on_disk_before_the_send_starts(make_ctx, api):
    ctx = make_ctx()
    seen = []

    class Spy:
        def send(self, alert):
            seen.append(sorted(p.name for p in ctx.outbox.dir.glob("*.json")))

    ctx.channel_factory = lambda name, cfg, env=None: Spy()
    alert = raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    assert seen == [[f"{alert.id}.json"]]
    assert ctx.outbox.load_all() == []  # removed only after the confirmed send


def test_sender_killed_mid_send_loses_nothing_and_resend_keeps_the_id(tmp_path, make_ctx, api,
                                                                      creds):
    state, spool = tmp_path / "state", tmp_path / "spool"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "generator")!r}]
        from datetime import UTC, datetime
        from market_timers.alerts.api import raise_alert
        from market_timers.config.alerts import parse_alerts
        from market_timers.alerts.context import AlertContext
        from market_timers.schema.problems import Problems

        class Dies:
            def send(self, alert):
                os.kill(os.getpid(), signal.SIGKILL)

        cfg = parse_alerts({{"telegram": {{"chat_id": "1", "api_base": {api.base!r}}}}}, Problems())
        ctx = AlertContext(cfg, {str(state)!r}, {str(spool)!r},
                           now=lambda: datetime(2026, 11, 30, 14, 31, tzinfo=UTC))
        ctx.channel_factory = lambda name, cfg, env=None: Dies()
        raise_alert(ctx, kind="failed", job="killed-sender", session="2026-11-30")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30)
    assert proc.returncode == -signal.SIGKILL
    [path] = list((spool / "outbox").glob("*.json"))
    spooled_id = json.loads(path.read_text())["id"]

    ctx = make_ctx({"telegram": {"chat_id": "1", "api_base": api.base}})
    assert ctx.spool_dir == spool
    flush(ctx)
    [msg] = api.received("telegram")
    assert "killed-sender failed" in msg["text"] and spooled_id in msg["text"]
    assert ctx.outbox.load_all() == []


def test_spool_write_is_atomic_no_temp_files_left(make_ctx, api):
    ctx = make_ctx()
    api.fail_next("telegram", 500, times=3)
    api.fail_next("slack", 500, times=3)
    raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    names = os.listdir(ctx.outbox.dir)
    assert [n for n in names if n.endswith(".json")] and not [n for n in names if ".tmp" in n]


def test_an_alert_raised_during_a_short_send_is_sent_once_that_send_ends(make_ctx, api):
    """The halt's own alert held the outbox's lock while the stop's alert was spooled (e2e,
    test_halt): the stop's alert waits for that send, not for the outbox timer's minute."""
    ctx = make_ctx()
    holding, release = threading.Event(), threading.Event()

    def another_sender():
        with ctx.outbox.lock(wait=True):
            holding.set()
            release.wait(5)

    sender = threading.Thread(target=another_sender)
    sender.start()
    holding.wait(5)
    threading.Timer(0.5, release.set).start()
    alert = raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
    sender.join()
    [msg] = api.received("telegram")
    assert alert.title in msg["text"]
    assert ctx.outbox.load_all() == []


def test_flush_while_another_sender_holds_the_lock_leaves_alert_for_later(make_ctx, api):
    ctx = make_ctx()
    ctx.busy_patience = 0.3  # the send in progress outlasts the immediate try's patience
    with ctx.outbox.lock(wait=False) as held:
        assert held
        alert = raise_alert(ctx, kind="failed", job="j", session="2026-11-30")
        assert api.received() == []
    assert [a.id for a in ctx.outbox.load_all()] == [alert.id]
    flush(ctx)
    assert len(api.received()) == 1
