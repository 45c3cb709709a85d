"""The alert snapshot decides where every alert and secret goes: only root's sync may write it
(issue 29). A snapshot the package's user, a job or another local user could have written is
never used; a broken config's own valid [alerts] wins over the snapshot; as root, the user and
the credential names never come from a file."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from test_alerts_broken_config import good_text  # tests/alerts is on sys.path

from market_timers.alerts import privileges, snapshot
from market_timers.config import loader as config_mod
from market_timers.contracts import environment

WHEN = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
ATTACKER = "http://127.0.0.1:9/attacker"


@pytest.fixture
def synced(tmp_path, api):
    """A config that synced (snapshot written), then broken, [alerts] included."""
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api))
    written = snapshot.write(config_mod.load(path), WHEN)
    path.write_text(good_text(tmp_path, api, grace="60", repeat="-5"))
    return path, written


def test_sync_writes_the_snapshot_in_its_own_0755_directory(synced, tmp_path):
    _, written = synced
    assert written == tmp_path / "state" / "sync" / snapshot.SNAPSHOT
    assert oct(written.parent.stat().st_mode & 0o777) == "0o755"
    assert written.parent.stat().st_uid == os.geteuid()
    assert "user" not in json.loads(written.read_text())


def test_a_snapshot_at_the_old_job_writable_place_is_never_read(tmp_path, api):
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api, grace="60", repeat="-5"))
    (tmp_path / "state").mkdir()
    forged = {"version": 1, "source": str(path), "state_dir": f"{tmp_path}/state",
              "spool_dir": f"{tmp_path}/spool", "jobs": [],
              "alerts": {"telegram": {"chat_id": "-1", "api_base": ATTACKER}}}
    (tmp_path / "state" / snapshot.SNAPSHOT).write_text(json.dumps(forged))
    cfg = snapshot.load(path)
    assert cfg.alerts.telegram.api_base == api.base  # the file's own, leniently
    assert "no usable snapshot" in cfg.alert_note


@pytest.mark.parametrize("attack", ["other-owner", "group-writable-dir", "world-writable-file",
                                    "symlinked-file", "another-config"])
def test_an_untrusted_snapshot_is_not_used_and_says_why(synced, tmp_path, api, attack, caplog):
    path, written = synced
    doc = json.loads(written.read_text())
    doc["alerts"]["telegram"]["api_base"] = ATTACKER
    written.write_text(json.dumps(doc))
    if attack == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("needs root to give the file away")
        os.chown(written, 65534, 65534)
    elif attack == "group-writable-dir":
        os.chmod(written.parent, 0o775)
    elif attack == "world-writable-file":
        os.chmod(written, 0o666)
    elif attack == "symlinked-file":
        real = tmp_path / "elsewhere.json"
        real.write_text(json.dumps(doc))
        written.unlink()
        written.symlink_to(real)
    else:
        doc["source"] = str(tmp_path / "other.toml")
        written.write_text(json.dumps(doc))
    with caplog.at_level(logging.ERROR, logger="market_timers.alerts"):
        cfg = snapshot.load(path)
    assert cfg.alerts.telegram.api_base == api.base, "the forged snapshot was used"
    assert "is not used" in caplog.text or "not used" in caplog.text


def test_a_planted_sync_directory_is_moved_aside_not_written_into(tmp_path, api):
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api))
    planted = tmp_path / "state" / "sync"
    planted.mkdir(parents=True)
    os.chmod(planted, 0o777)
    (planted / "keep").write_text("x")
    written = snapshot.write(config_mod.load(path), WHEN)
    assert oct(written.parent.stat().st_mode & 0o777) == "0o755"
    assert not (written.parent / "keep").exists()
    assert [p.name for p in (tmp_path / "state").iterdir() if p.name.startswith("sync.untrusted")]


def test_a_broken_configs_own_valid_alerts_table_wins_over_the_snapshot(tmp_path, api):
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api).replace(api.base, ATTACKER))  # the old route
    snapshot.write(config_mod.load(path), WHEN)
    path.write_text(good_text(tmp_path, api, grace="60"))  # new route, a job broken
    cfg = snapshot.load(path)
    assert cfg.alerts.telegram.api_base == api.base
    assert "valid on their own" in cfg.alert_note


def test_root_switches_to_the_package_user_whatever_the_config_or_snapshot_says(monkeypatch):
    asked = []

    def getpwnam(name):
        asked.append(name)
        raise KeyError(name)

    monkeypatch.setattr(privileges.os, "geteuid", lambda: 0)
    monkeypatch.setattr(privileges.pwd, "getpwnam", getpwnam)
    assert privileges.become_service_user(SimpleNamespace(user="nobody")) is False
    assert asked == [environment.PACKAGE_USER]


def test_root_hands_over_only_credentials_a_unit_of_the_package_loads(tmp_path, caplog,
                                                                     monkeypatch):
    units = tmp_path / "system"
    (units / "market-outbox.service.d").mkdir(parents=True)
    (units / "market-deadman.service").write_text(
        "[Service]\n# LoadCredential=commented\nLoadCredential=market-timers.deadman-ping-url\n")
    (units / "market-outbox.service.d" / "market-timers-credentials.conf").write_text(
        "[Service]\nLoadCredential=tg-prod\n")
    if os.geteuid() == 0:  # a drop-in that is not root's counts for nothing
        (units / "market-x.service").write_text("[Service]\nLoadCredential=ssh_host_rsa_key\n")
        os.chown(units / "market-x.service", 65534, 65534)
    assert privileges.loaded_credential_names([units]) == {"market-timers.deadman-ping-url",
                                                           "tg-prod"}
    # What a config (or a forged snapshot) could name: a renamed channel secret, a host key.
    monkeypatch.setattr(privileges, "credential_names",
                        lambda config: ["ssh_host_rsa_key", "tg-prod", "../shadow"])
    with caplog.at_level(logging.WARNING, logger="market_timers.alerts"):
        assert privileges.names_to_hand_over(object(), [units]) == ["tg-prod"]
    assert "'ssh_host_rsa_key' is loaded by no unit" in caplog.text


def test_a_sync_with_the_same_config_leaves_the_snapshot_as_it_is(tmp_path, api):
    """Issue 46: a sync with nothing to do writes no file. The snapshot of the same good config
    is not written again (its written_utc stays the time it last changed); a changed [alerts]
    or a snapshot made 0600 by hand is."""
    path = tmp_path / "market-timers.toml"
    path.write_text(good_text(tmp_path, api))
    written = snapshot.write(config_mod.load(path), WHEN)
    before = (written.stat().st_ino, written.stat().st_mtime_ns)
    snapshot.write(config_mod.load(path), datetime(2026, 12, 1, 6, 0, tzinfo=UTC))
    assert (written.stat().st_ino, written.stat().st_mtime_ns) == before
    assert json.loads(written.read_text())["written_utc"] == "2026-11-30T06:00:00Z"
    os.chmod(written, 0o600)
    snapshot.write(config_mod.load(path), datetime(2026, 12, 2, 6, 0, tzinfo=UTC))
    assert oct(written.stat().st_mode & 0o777) == "0o644"
    path.write_text(good_text(tmp_path, api, repeat="7"))
    snapshot.write(config_mod.load(path), datetime(2026, 12, 3, 6, 0, tzinfo=UTC))
    doc = json.loads(written.read_text())
    assert doc["written_utc"] == "2026-12-03T06:00:00Z" and doc["alerts"]["repeat_minutes"] == 7
