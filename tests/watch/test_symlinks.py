"""Medium 4: root-run commands never follow a symlink planted in state_dir or spool_dir.

Every job runs as the package user, who owns state_dir and spool_dir: a planted
`state_dir/sync.lock -> /etc/nologin` made root's `sync` create /etc/nologin. Each case plants a
symlink to a target outside (standing in for /etc/nologin or /etc/shadow) and runs the command as
root would: the target is neither created nor changed nor read.
"""

from __future__ import annotations

import json
import shutil

import pytest

from market_timers.alerts import delivery, snapshot
from market_timers.alerts.api import raise_alert
from market_timers.alerts.commands import ack
from market_timers.alerts.context import AlertContext
from market_timers.cli.synced import after_sync
from market_timers.files import safefs
from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import deadman

from .conftest import THANKSGIVING_CONFIG, utc

NOW = utc("2025-12-01T12:00:00Z")
ALERTS = "\n[alerts]\n[alerts.slack]\n"


@pytest.fixture
def target(tmp_path):
    """What a symlink points at: must stay absent (as /etc/nologin) ..."""
    return tmp_path / "outside" / "nologin"


@pytest.fixture
def precious(tmp_path):
    """... or unchanged (as /etc/shadow)."""
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"secret": "root:$6$hash"}')
    return path


def plant(link, to):
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(to)


@pytest.mark.parametrize("name", ["sync.lock"])
def test_sync_refuses_a_planted_lock_symlink(make_config, fake_systemctl, tmp_path, target,
                                             name):
    config = make_config(THANKSGIVING_CONFIG)
    plant(config.state_dir / name, target)
    with pytest.raises(safefs.SymlinkRefused):
        sync_mod.sync(config, now=NOW, systemctl=fake_systemctl, stamp_dir=tmp_path / "st")
    assert not target.exists()


@pytest.mark.parametrize("name", ["plan.json", f"sync/{snapshot.SNAPSHOT}"])
def test_sync_replaces_a_planted_symlink_never_writes_through_it(make_config, fake_systemctl,
                                                                 tmp_path, precious, name):
    config = make_config(THANKSGIVING_CONFIG + ALERTS)
    before = precious.read_text()
    plant(config.state_dir / name, precious)
    sync_mod.sync(config, now=NOW, systemctl=fake_systemctl, stamp_dir=tmp_path / "st")
    after_sync(config, NOW)  # the alert snapshot, as the sync command writes it after the sync
    assert precious.read_text() == before
    path = config.state_dir / name
    assert not path.is_symlink() and json.loads(path.read_text())


def test_sync_cli_reports_the_refused_symlink(make_config, fake_systemctl, tmp_path, target,
                                              capsys, monkeypatch):
    from market_timers.cli import main

    make_config(THANKSGIVING_CONFIG)
    plant(tmp_path / "state" / "sync.lock", target)
    real = sync_mod.sync
    monkeypatch.setattr(sync_mod, "sync", lambda cfg, **kw: real(
        cfg, now=NOW, dry_run=kw.get("dry_run", False), systemctl=fake_systemctl,
        stamp_dir=tmp_path / "st"))
    code = main(["--config", str(tmp_path / "market-timers.toml"), "sync"])
    assert code == 1
    assert "refusing to follow a symlink" in capsys.readouterr().err
    assert not target.exists()


def test_deadman_refuses_a_planted_plan_and_state(make_config, fake_systemctl, alerts, precious,
                                                  target):
    config = make_config(THANKSGIVING_CONFIG)
    before = precious.read_text()
    plant(config.state_dir / "plan.json", precious)
    plant(config.state_dir / "deadman.json", target)
    result = deadman.run_pass(config, NOW, systemctl=fake_systemctl, alert=alerts, env={})
    assert any("symlink" in e for e in result.errors)
    assert precious.read_text() == before and not target.exists()


def test_run_records_behind_symlinks_are_not_read(tmp_path, precious):
    state = tmp_path / "state"
    plant(state / "runs" / "signal" / "2025-12-01.json", precious)
    assert runrecord.read(state, "signal", "2025-12-01") is None
    assert runrecord.all_records(state) == []
    plant(state / "runs", precious.parent)  # the whole directory
    assert runrecord.all_records(state) == []


def ctx_for(tmp_path) -> AlertContext:
    from market_timers.config.alerts import parse_alerts
    from market_timers.schema.problems import Problems

    return AlertContext(parse_alerts({"webhook": {}}, Problems()), tmp_path / "state",
                        tmp_path / "spool", now=lambda: NOW, env={})


@pytest.mark.parametrize("rel", [
    "state/alerts",  # the whole alert state directory
    "state/alerts/.state.lock",
    "state/alerts/dedup.json",
    "state/alerts/dedup.jsonl",
    "state/alerts/jobs/signal.json",
    "state/alerts/events/2025-12-01.jsonl",
    "spool/outbox",
    "spool/outbox/.lock",
])
def test_alert_state_and_outbox_never_write_through_a_symlink(tmp_path, target, precious, rel):
    ctx = ctx_for(tmp_path)
    to = precious.parent if rel in ("state/alerts", "spool/outbox") else target
    plant(tmp_path / rel, to)
    before = sorted(p.name for p in precious.parent.iterdir())
    raise_alert(ctx, kind="failed", job="signal", session="2025-12-01", text="x")
    assert sorted(p.name for p in precious.parent.iterdir()) == before
    assert not target.exists()


def test_marker_and_escalation_symlinks_are_not_followed(tmp_path, target, precious):
    ctx = ctx_for(tmp_path)
    before = precious.read_text()
    plant(tmp_path / "state" / "alerts" / snapshot.MARKER, precious)
    plant(tmp_path / "state" / "alerts" / "active" / "1130-0123abcd.json", precious)
    assert ack(ctx, "1130-0123abcd") == 0  # removes the link itself
    assert precious.read_text() == before
    cfg = type("C", (), {"state_dir": tmp_path / "state", "spool_dir": tmp_path / "spool",
                         "alerts": ctx.cfg, "broken": None})()
    snapshot.announce(cfg)  # the config loads: the marker (a symlink) is read as nothing
    assert precious.read_text() == before
    delivery.flush(ctx)
    assert precious.read_text() == before
