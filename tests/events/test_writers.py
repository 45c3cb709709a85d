"""Events carry their writer (issue 41): the spool is sticky, so a file's owner is who wrote it;
an incident rule's `writers` name the users who may open and close its incidents, and an event
of its kinds from anyone else is refused: set aside, counted, told in the pass's one warning,
never routed. A job cannot close the gateway's incident."""

from __future__ import annotations

import os
import pwd
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_timers.events import spool
from market_timers.events.process import drain, read_event
from market_timers.schema.problems import ConfigError

T0 = datetime(2025, 11, 13, 15, 0, tzinfo=UTC)
GATEWAY, JOB = "daemon", "nobody"  # two users of every Debian host, neither root
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as others")

RULES = {"incident": [{"name": "connection", "open": ["heartbeat_lost", "disconnected"],
                       "close": ["reconnected"], "interrupt_after": "60s",
                       "writers": [GATEWAY]}]}


def spooled_by(dirs, user: str, kind: str, at: datetime) -> Path:
    path = Path(spool.write(spool.make_event(kind, key="gw1", at=at.timestamp()), dirs))
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def run(ctx, cfg, dirs, now):
    ctx.now = lambda: now
    return drain(ctx, cfg.events, cfg.state_dir, dirs, now)


def test_writers_are_user_names(example):
    with pytest.raises(ConfigError) as e:
        example(events={"incident": [dict(RULES["incident"][0], writers=["gw\n"])]})
    [line] = [x for x in e.value.problems.lines() if "writers" in x]
    assert "events.incident[0].writers[0]:" in line and "user name" in line
    cfg = example(events=RULES)
    assert cfg.events.incidents[0].writers == (GATEWAY,)


@needs_root
def test_the_file_owner_is_the_writer_whatever_the_file_says(dirs):
    path = spooled_by(dirs, JOB, "reconnected", T0)
    text = path.read_text().replace('"uid": 0', '"uid": 1')
    path.write_text(text)
    os.chown(path, pwd.getpwnam(JOB).pw_uid, -1)
    assert read_event(path)["writer_uid"] == pwd.getpwnam(JOB).pw_uid


@needs_root
def test_a_job_cannot_close_the_gateways_incident(example, ctx_for, dirs, api):
    cfg = example(events=RULES)
    ctx = ctx_for(cfg)
    spooled_by(dirs, GATEWAY, "heartbeat_lost", T0)
    spooled_by(dirs, JOB, "reconnected", T0 + timedelta(seconds=1))
    spooled_by(dirs, JOB, "reconnected", T0 + timedelta(seconds=2))
    engine = run(ctx, cfg, dirs, T0 + timedelta(seconds=3))
    assert [o for o, _ in engine.outcomes] == ["opened"]  # the job's closes were not routed
    [told, *_] = [m["text"] for m in api.received() if "set aside" in m["text"]]
    assert "2 " in told.splitlines()[0]  # counted, in one warning
    assert f"written by {JOB}" in told and "connection" in told and GATEWAY in told
    assert list(Path(dirs[0]).glob("*.json")) == []
    run(ctx, cfg, dirs, T0 + timedelta(seconds=61))  # still open: alerted when it passes
    texts = [m.get("text", "") for m in api.received()]
    assert any("connection gw1: not resolved after" in t for t in texts), texts


@needs_root
def test_the_gateway_closes_its_own_incident(example, ctx_for, dirs, api):
    cfg = example(events=RULES)
    ctx = ctx_for(cfg)
    spooled_by(dirs, GATEWAY, "heartbeat_lost", T0)
    spooled_by(dirs, GATEWAY, "reconnected", T0 + timedelta(seconds=1))
    engine = run(ctx, cfg, dirs, T0 + timedelta(seconds=2))
    assert [o for o, _ in engine.outcomes] == ["opened", "resolved"]


@needs_root
def test_a_rule_without_writers_takes_every_writer_as_before(example, ctx_for, dirs, api):
    cfg = example()
    ctx = ctx_for(cfg)
    spooled_by(dirs, GATEWAY, "heartbeat_lost", T0)
    spooled_by(dirs, JOB, "reconnected", T0 + timedelta(seconds=1))
    engine = run(ctx, cfg, dirs, T0 + timedelta(seconds=2))
    assert [o for o, _ in engine.outcomes] == ["opened", "resolved"]


@needs_root
def test_events_writers_refuse_every_kind_from_anyone_else(example, ctx_for, dirs, api):
    """`[events] writers`: the sources of every event; a rule's own `writers` are its own."""
    cfg = example(events={"writers": [GATEWAY], "severity": {"rejected": "critical"}})
    assert cfg.events.writers == (GATEWAY,)
    ctx = ctx_for(cfg)
    spooled_by(dirs, JOB, "rejected", T0)
    spooled_by(dirs, GATEWAY, "rejected", T0 + timedelta(seconds=1))
    engine = run(ctx, cfg, dirs, T0 + timedelta(seconds=2))
    assert [o for o, _ in engine.outcomes] == ["alert"]  # the gateway's only
    texts = [m.get("text", "") for m in api.received()]
    assert any(f"written by {JOB}" in t and "[events] writers" in t for t in texts), texts


@needs_root
def test_refused_writers_are_an_alert_of_their_own_told_once(example, ctx_for, dirs, api):
    """issue 45: refused events were counted under "N malformed event file(s) set aside", with
    the files that were not events at all."""
    cfg = example(events=RULES)
    ctx = ctx_for(cfg)
    spooled_by(dirs, JOB, "reconnected", T0)
    spooled_by(dirs, JOB, "reconnected", T0 + timedelta(seconds=1))
    (Path(dirs[0]) / "0000-junk.json").write_text("not an event")
    run(ctx, cfg, dirs, T0 + timedelta(seconds=2))
    uid = pwd.getpwnam(JOB).pw_uid
    texts = [m["text"] for m in api.received("slack")]
    [refused] = [t for t in texts if "events from an unexpected writer refused" in t]
    assert f"refused: 2 from {JOB} (uid {uid})" in refused.splitlines()[0]
    assert "connection" in refused and GATEWAY in refused  # who may, and for what
    [malformed] = [t for t in texts if "malformed" in t]
    assert "1 malformed event file(s) set aside" in malformed and JOB not in malformed
    spooled_by(dirs, JOB, "reconnected", T0 + timedelta(seconds=3))  # the same writer again
    run(ctx, cfg, dirs, T0 + timedelta(seconds=4))
    texts = [m["text"] for m in api.received("slack")]
    assert sum("unexpected writer" in t for t in texts) == 1  # told once
