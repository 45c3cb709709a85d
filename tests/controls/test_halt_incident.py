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
    assert len(halted) == 2 and all(t.startswith("HALT: order jobs") for t in halted)
    assert main(path, "resume") == 0
    assert open_criticals(tmp_path) == []
