"""`status` shows each session's incidents and counted events next to its jobs."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from market_timers.events.store import Store
from market_timers.watch import status


class NoSystemctl:
    def show(self, units, props):
        return {}


class Cfg:
    def __init__(self, tmp_path):
        self.state_dir = tmp_path / "state"
        self.spool_dir = tmp_path / "spool"
        self.watch = None
        self.alerts = None


def test_status_lists_the_sessions_incidents_opened_resolved_duration_and_alerted(tmp_path,
                                                                                  capsys):
    cfg = Cfg(tmp_path)
    cfg.state_dir.mkdir()
    (cfg.state_dir / "plan.json").write_text(json.dumps({"generated_utc": "2025-11-13T00:00:00Z",
        "fires": [{"job": "disconnect", "session": "2025-11-13", "unit": "market-disconnect@x",
                   "fire_utc": "2025-11-13T21:05:00Z", "grace_sec": 120, "timeout_sec": 60}]}))
    store = Store(cfg.state_dir)
    store.put_incident({"id": "1113-a", "rule": "connection", "key": "real",
                        "session": "2025-11-13", "opened": "2025-11-13T16:45:11.000Z",
                        "resolved": "2025-11-13T16:46:23.000Z", "duration_sec": 72,
                        "state": "resolved", "handling": "alerted", "alert_id": "1113-b",
                        "alerted_at": "2025-11-13T16:46:11.001Z", "recovery_id": "1113-c",
                        "count": 3, "events": [{"kind": "heartbeat_lost"},
                                               {"kind": "disconnected"},
                                               {"kind": "reconnected"}]})
    now = datetime(2025, 11, 13, 22, tzinfo=UTC)
    assert status.command(cfg, None, True, now, systemctl=NoSystemctl()) == 0
    [session] = json.loads(capsys.readouterr().out)["sessions"]
    [inc] = session["incidents"]
    assert (inc["duration_sec"], inc["handling"]) == (72, "alerted")
    assert status.command(cfg, None, False, now, systemctl=NoSystemctl()) == 0
    table = capsys.readouterr().out
    assert ("2025-11-13  incident  connection real: opened 16:45:11Z, resolved 16:46:23Z after "
            "72 s, alerted 1113-b at 16:46:11Z, recovery sent (3 events: heartbeat_lost, "
            "disconnected, reconnected)") in table
