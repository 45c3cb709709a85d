"""High 1: one config typo must not silence alerting.

With `grace = 60` (an integer) the live config does not load; `alert-handler`, `outbox flush` and
`deadman` used to exit 2, so nothing was sent. Now they run on the last good snapshot sync wrote
(or the file's own [alerts] table), say so in each alert, and a broken config is one critical
alert per content of the file.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from market_timers.alerts import snapshot
from market_timers.channels.credentials import OVERRIDE
from market_timers.cli import main
from market_timers.config import loader as config_mod

UNIT = "market-signal@2026-11-30-204500.service"


def good_text(tmp_path, api, grace='"2min"', repeat="0") -> str:
    return f"""
calendar = "XNYS"
state_dir = "{tmp_path}/state"
spool_dir = "{tmp_path}/spool"
unit_dir = "{tmp_path}/units"

[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
grace = {grace}

[alerts]
repeat_minutes = {repeat}

[alerts.telegram]
chat_id = "-42"
api_base = "{api.base}"
"""


@pytest.fixture
def env(tmp_path, api, creds, monkeypatch):
    """A config that synced once (snapshot written), then broken by `grace = 60` and, in its
    [alerts] table, `repeat_minutes = -5` (a valid [alerts] of its own would be used instead)."""
    monkeypatch.setenv(OVERRIDE, str(creds))
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api))
    snapshot.write(config_mod.load(path),
                   datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    path.write_text(good_text(tmp_path, api, grace="60", repeat="-5"))
    with pytest.raises(config_mod.ConfigError):
        config_mod.load(path)
    return path


def broken_alerts(api) -> list[str]:
    return [m["text"] for m in api.received("telegram") if "is broken\n" in m["text"]
            or m["text"].startswith("[CRITICAL] config ")]


def failure(path, monkeypatch) -> int:
    for k, v in {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited",
                 "MONITOR_EXIT_STATUS": "3"}.items():
        monkeypatch.setenv(k, v)
    return main(["--config", str(path), "alert-handler", "failure", UNIT])


def test_handler_with_a_broken_config_still_alerts_and_says_so(env, api, monkeypatch):
    assert failure(env, monkeypatch) == 0
    texts = [m["text"] for m in api.received("telegram")]
    [job] = [t for t in texts if "signal failed with exit status 3" in t]
    assert "is broken" in job and "last good snapshot written by sync at 2026-11-30" in job
    [broken] = [t for t in texts if t.startswith("[CRITICAL] config ")]
    assert "job.signal.grace" in broken and "60" in broken
    assert failure(env, monkeypatch) == 0  # a second failure: no second config alert
    assert len([t for t in (m["text"] for m in api.received("telegram"))
                if t.startswith("[CRITICAL] config ")]) == 1


def test_flush_with_a_broken_config_delivers_the_spool(env, api, tmp_path, monkeypatch):
    api.fail_next("telegram", 500, times=2)  # the handler's try and the config alert fail
    assert failure(env, monkeypatch) == 0
    assert api.received("telegram") == []
    # the outbox timer, a minute later (past the backoff of the first attempt)
    flushes = [main(["--config", str(env), "outbox", "flush"]) for _ in range(1)]
    assert flushes == [0]
    spool = tmp_path / "spool" / "outbox"
    for f in spool.glob("*.json"):  # make every retry due now
        doc = json.loads(f.read_text())
        doc["not_before"] = ""
        f.write_text(json.dumps(doc))
    assert main(["--config", str(env), "outbox", "flush"]) == 0
    texts = [m["text"] for m in api.received("telegram")]
    assert any("signal failed with exit status 3" in t for t in texts)
    assert len([t for t in texts if t.startswith("[CRITICAL] config ")]) == 1
    assert list(spool.glob("*.json")) == []


def test_deadman_with_a_broken_config_reports_a_miss(env, api, tmp_path):
    now = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
    fire = now - timedelta(hours=1, minutes=15)
    state = tmp_path / "state"
    (state / "plan.json").write_text(json.dumps({
        "generated_utc": (now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fires": [{"job": "signal", "session": "2026-11-30", "calendar": "XNYS",
                   "event": "close", "offset": "-15min", "unit": UNIT.replace(".service",
                                                                             ".timer"),
                   "fire_utc": fire.strftime("%Y-%m-%dT%H:%M:%SZ"), "grace_sec": 60,
                   "timeout_sec": 300, "severity": "critical"}]}))
    code = main(["--config", str(env), "--now", "2026-11-30T22:00:00Z", "deadman"])
    assert code == 0
    texts = [m["text"] for m in api.received("telegram")]
    [missed] = [t for t in texts if "did not run for session 2026-11-30" in t]
    assert "last good snapshot" in missed
    assert len([t for t in texts if t.startswith("[CRITICAL] config ")]) == 1


def test_one_broken_config_alert_per_content_and_again_after_a_fix(env, api, tmp_path,
                                                                   monkeypatch):
    def flush():
        assert main(["--config", str(env), "outbox", "flush"]) == 0

    def count():
        return len([m for m in api.received("telegram")
                    if m["text"].startswith("[CRITICAL] config ")])

    flush()
    flush()
    assert count() == 1
    env.write_text(good_text(tmp_path, api, grace="61"))  # another broken content
    flush()
    assert count() == 2
    env.write_text(good_text(tmp_path, api))  # fixed
    flush()
    assert not (tmp_path / "state" / "alerts" / snapshot.MARKER).exists()
    env.write_text(good_text(tmp_path, api, grace="60", repeat="-5"))  # the first break again
    flush()
    assert count() == 3


def test_without_a_snapshot_the_files_own_alerts_table_is_used(tmp_path, api, creds,
                                                               monkeypatch):
    monkeypatch.setenv(OVERRIDE, str(creds))
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api, grace="60"))
    assert failure(path, monkeypatch) == 0
    texts = [m["text"] for m in api.received("telegram")]
    [job] = [t for t in texts if "signal failed with exit status 3" in t]
    assert "[alerts] and [watch] tables, which are valid on their own" in job
    assert len([t for t in texts if t.startswith("[CRITICAL] config ")]) == 1


def test_unparseable_toml_still_finds_state_dir_and_the_snapshot(env, api, tmp_path,
                                                                 monkeypatch):
    env.write_text(good_text(tmp_path, api) + "\n[alerts\nbroken = \n")
    assert failure(env, monkeypatch) == 0
    texts = [m["text"] for m in api.received("telegram")]
    assert any("signal failed" in t and "last good snapshot" in t for t in texts)
    assert any(t.startswith("[CRITICAL] config ") and "not valid TOML" in t for t in texts)


def test_ack_and_outbox_list_work_with_a_broken_config(env, api, capsys):
    assert main(["--config", str(env), "outbox", "list"]) == 0
    assert main(["--config", str(env), "ack", "1130-0123abcd"]) == 2  # unknown: refused


def test_the_snapshot_holds_no_secret_and_is_readable(env, tmp_path, creds):
    path = snapshot.snapshot_path(tmp_path / "state")
    text = path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    for f in creds.iterdir():
        assert f.read_text().strip() not in text


def test_no_snapshot_and_a_toml_syntax_error_elsewhere_still_alerts(tmp_path, api, creds,
                                                                    monkeypatch):
    """Before the first sync, a syntax error in a job must not cost the [alerts] table."""
    monkeypatch.setenv(OVERRIDE, str(creds))
    path = tmp_path / "market-timers.toml"
    text = good_text(tmp_path, api).replace('command = ["/bin/true"]', 'command = ["/bin/true"')
    path.write_text(text + '\n[watch]\nslack_sec = 5\n[overrides.XNYS]\nclosed = [2026-13-45]\n')
    assert failure(path, monkeypatch) == 0
    texts = [m["text"] for m in api.received("telegram")]
    assert any("signal failed" in t and "which are valid on their own" in t for t in texts)
    assert any(t.startswith("[CRITICAL] config ") and "not valid TOML" in t for t in texts)
    cfg = snapshot.load(path)
    assert cfg.watch.slack_sec == 5 and str(cfg.state_dir) == f"{tmp_path}/state"


def test_the_broken_config_alert_lists_each_key_once(env, api, monkeypatch):
    """Seen: the broken-config alert listed the 37 known keys of [[job]] twice (its problem
    and the note every alert of a broken config carries, which quoted the same problem)."""
    env.write_text(env.read_text().replace('command = ["/bin/true"]',
                                           'comand = ["/bin/true"]'))
    assert failure(env, monkeypatch) == 0
    [broken] = [t for t in broken_alerts(api) if t.startswith("[CRITICAL] config ")]
    assert broken.count("job.signal.comand: unknown key (known: ") == 1
    assert broken.count("retry_delay_max") == 1
    assert "last good snapshot written by sync at 2026-11-30" in broken  # how alerts are routed
