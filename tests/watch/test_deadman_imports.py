"""An idle dead-man pass loads only what it uses (issue 46 item 3).

market-deadman.timer starts `market-timers deadman` every minute, and nearly every pass finds
nothing: its process must not load what only sending an alert needs (http.client, ssl, smtplib,
email) nor the calendars. Here: one pass of the command as its own process, with
Telegram and email configured, a plan whose only fire is ahead, systemd answering that its timer
waits; what the process had loaded when the pass ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NOW = "2026-12-07T12:00:00Z"  # a Monday: signal's fire is at the close, hours ahead
FIRE = "2026-12-07T20:45:00Z"
UNIT = "market-signal@2026-12-07-204500.timer"

# What only a pass that alerts needs: what the channels send with (the configured channels'
# modules are loaded by the config's check of their settings, their SPEC); never the calendars.
SENDING = ("http.client", "ssl", "smtplib", "email", "urllib.request",
           "market_timers.channels.httppost")
CALENDARS = ("pandas", "exchange_calendars")
METRICS = "market_timers.metrics"  # no node_exporter directory: no textfile to write
# the page is restamped, not rebuilt (status.py); the operator's requests are not this command's
OTHERS = ("market_timers.watch.status", "market_timers.cli.controlrequests")

CONFIG = """\
calendar = "XNYS"
state_dir = "{tmp}/state"
spool_dir = "{tmp}/spool"
unit_dir = "{tmp}/units"
page_dir = "{tmp}/www"

[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]

[metrics]
textfile = "{tmp}/node-exporter/market_timers.prom"

[alerts.telegram]
chat_id = "-42"
api_base = "http://127.0.0.1:9"

[alerts.email]
host = "127.0.0.1"
from = "market-timers@example.org"
to = ["ops@example.org"]
"""

# systemctl as the pass asks it: each timer named is loaded and waiting; no unit has failed.
FAKE_SYSTEMCTL = """#!/bin/sh
case "$*" in *--state=*) exit 0;; esac
for unit in "$@"; do
  case "$unit" in market-*.timer) echo "$unit loaded active waiting x";; esac
done
"""

PASS = """\
import json, sys
from market_timers.cli import main
code = main(["--config", sys.argv[1], "--now", sys.argv[2], "deadman"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def one_pass(tmp_path: Path) -> dict:
    """`market-timers deadman` as its own process: its exit status and the modules it loaded."""
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    out = subprocess.run([sys.executable, "-c", PASS, str(tmp_path / "c.toml"), NOW], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def idle_host(tmp_path: Path) -> None:
    for name in ("state", "spool", "units", "www", "bin"):
        (tmp_path / name).mkdir()
    (tmp_path / "c.toml").write_text(CONFIG.format(tmp=tmp_path))
    (tmp_path / "state" / "plan.json").write_text(json.dumps({
        "generated_utc": "2026-12-07T06:00:00Z",
        "fires": [{"job": "signal", "session": "2026-12-07", "calendar": "XNYS",
                   "event": "close", "offset": "-15min", "unit": UNIT, "fire_utc": FIRE,
                   "grace_sec": 60, "timeout_sec": 300, "severity": "critical"}]}))
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(FAKE_SYSTEMCTL)
    systemctl.chmod(0o755)


def test_an_idle_pass_loads_no_channel_and_no_calendar(tmp_path):
    idle_host(tmp_path)
    one_pass(tmp_path)  # the first pass: reads the timer, builds the page
    second = one_pass(tmp_path)  # what market-deadman.timer starts every minute
    assert second["code"] == 0
    assert (tmp_path / "www" / "status.html").is_file()
    assert not list((tmp_path / "spool").rglob("*.json"))  # nothing was found, nothing spooled
    loaded = [m for m in (*SENDING, *CALENDARS, METRICS, *OTHERS) if m in second["modules"]]
    assert loaded == []
