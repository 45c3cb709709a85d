"""`resume` resolves its halt's incident: the HALT alert stops repeating (issue 45, item 1).

Seen: "HALT (repeat 1)" to Telegram, Slack and email 14 minutes after the halt was lifted, until
someone ran `ack` on each channel's alert id."""

from __future__ import annotations

import json

import pytest
from tests.controls.test_halt import CONFIG, main, systemd  # noqa: F401 (a fixture)


def open_criticals(tmp_path) -> list[str]:
    return sorted(json.loads(p.read_text())["alert"]["title"]
                  for p in tmp_path.rglob("alerts/active/*.json"))


@pytest.mark.usefixtures("systemd")
def test_resume_stops_the_halt_alerts_repeats_on_every_channel(write_config, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "no-credentials"))
    alerts = ('[alerts]\ndedup_minutes = 0\nrepeat_minutes = 15\n[alerts.telegram]\n'
              'chat_id = "-1"\napi_base = "http://127.0.0.1:9"\n[alerts.slack]\n')
    path = write_config(CONFIG.replace("[[job]]", alerts + "[[job]]", 1))
    assert main(path, "halt", "--reason", "runaway algo") == 0
    halted = open_criticals(tmp_path)
    assert len(halted) == 1 and halted[0].startswith("HALT: order jobs")  # one, every channel
    assert main(path, "resume") == 0
    assert open_criticals(tmp_path) == []


ALERTS = ('[alerts]\ndedup_minutes = 0\nrepeat_minutes = 15\n[alerts.telegram]\n'
          'chat_id = "-1"\napi_base = "http://127.0.0.1:9"\n[alerts.slack]\n')


def spooled(tmp_path, kind: str) -> list[dict]:
    """The outbox's messages of `kind` (the channels here are unreachable: they stay)."""
    docs = [json.loads(p.read_text()) for p in tmp_path.rglob("outbox/*.json")]
    return sorted((d for d in docs if d["kind"] == kind), key=lambda d: d["chain"])


@pytest.fixture
def halted(write_config, tmp_path, monkeypatch):
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "no-credentials"))
    path = write_config(CONFIG.replace("[[job]]", ALERTS + "[[job]]", 1))
    assert main(path, "halt", "--reason", "runaway algo") == 0
    return path


@pytest.mark.usefixtures("systemd")
def test_a_halt_is_one_alert_id_on_every_channel_and_one_ack_covers_it(halted, tmp_path,
                                                                       capsys):
    """Seen: each halt made three alert ids to acknowledge one by one."""
    messages = spooled(tmp_path, "halt")
    assert [m["chain"] for m in messages] == [["slack"], ["telegram"]]
    [alert_id] = {m["id"] for m in messages}
    assert len(open_criticals(tmp_path)) == 1
    capsys.readouterr()
    assert main(halted, "ack", alert_id) == 0
    assert "acknowledged" in capsys.readouterr().out
    assert open_criticals(tmp_path) == []


@pytest.mark.usefixtures("systemd")
def test_resume_resolves_the_halt_incident_on_every_channel(halted, tmp_path):
    [alert_id] = {m["id"] for m in spooled(tmp_path, "halt")}
    assert main(halted, "resume") == 0
    assert open_criticals(tmp_path) == []
    lifted = spooled(tmp_path, "halt-lifted")
    assert [m["chain"] for m in lifted] == [["slack"], ["telegram"]]
    assert len({m["id"] for m in lifted}) == 1
    assert all(f"alert {alert_id} is resolved" in m["text"] for m in lifted)
