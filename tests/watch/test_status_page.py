"""`market-timers status --html`: one self-contained page of sessions x jobs, loaded in a real
headless browser (Debian's chromium): it loads without errors, its cells are the status
document's (the states written out here from the runs this fixture makes), and a phone-sized
screenshot is produced (printed path; kept under the test's tmp dir).

Under CI=true a missing chromium is a failure (.ci/run installs it), never a skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import status, statuspage

from .conftest import THANKSGIVING_CONFIG, utc

CONFIG = THANKSGIVING_CONFIG + """
[[job]]
name = "orders"
event = "close"
offset = "-10min"
command = ["/bin/true"]
grace = "2min"
timeout = "5min"
"""
NOW = utc("2025-11-26T21:00:00Z")  # after Wednesday's fires; Thursday is Thanksgiving


@pytest.fixture
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (apt install chromium)")
        pytest.skip("chromium is not installed (apt install chromium)")
    return path


@pytest.fixture
def week(make_config, fake_systemctl, tmp_path):
    config = make_config(CONFIG)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    state = config.state_dir
    runrecord.update(state, "signal", "2025-11-24", scheduled_utc="2025-11-24T20:45:00Z",
                     started_utc="2025-11-24T20:45:00Z", finished_utc="2025-11-24T20:45:04Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=4,
                     late_sec=0.001, host="ny4-a")
    runrecord.update(state, "orders", "2025-11-24", scheduled_utc="2025-11-24T20:50:00Z",
                     started_utc="2025-11-24T20:50:00Z", finished_utc="2025-11-24T20:50:09Z",
                     result="exit-code", exit_code="exited", exit_status="3", duration_sec=9,
                     late_sec=0.002, host="ny4-a")
    runrecord.update(state, "signal", "2025-11-25", scheduled_utc="2025-11-25T20:45:00Z",
                     started_utc="2025-11-25T20:45:00Z", finished_utc="2025-11-25T20:45:03Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=3)
    runrecord.update(state, "signal", "2025-11-26", scheduled_utc="2025-11-26T20:45:00Z",
                     started_utc="2025-11-26T20:45:00Z", finished_utc="2025-11-26T20:45:02Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=2)
    runrecord.update(state, "orders", "2025-11-26", scheduled_utc="2025-11-26T20:50:00Z",
                     started_utc="2025-11-26T20:50:00Z", finished_utc="2025-11-26T20:50:01Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=1)
    return config


# What a user sees in each cell, written out from the runs above (orders on 11-25 never ran:
# missed; 11-28 is the early close, still ahead).
EXPECTED = {
    ("signal", "2025-11-24"): "ok", ("orders", "2025-11-24"): "failed",
    ("signal", "2025-11-25"): "ok", ("orders", "2025-11-25"): "missed",
    ("signal", "2025-11-26"): "ok", ("orders", "2025-11-26"): "ok",
    ("signal", "2025-11-28"): "scheduled", ("orders", "2025-11-28"): "scheduled",
}


class Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells: dict[tuple[str, str], str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td" and "data-job" in a:
            self.cells[(a["data-job"], a["data-session"])] = a["data-state"]


def test_the_page_in_a_browser_shows_each_session_and_job_as_status_does(
        week, fake_systemctl, chromium, tmp_path, capsys):
    fake_systemctl.now = NOW
    page = tmp_path / "week.html"
    assert status.command(week, None, False, NOW, str(page), utc("2025-11-24T00:00:00Z").date(),
                          utc("2025-11-28T00:00:00Z").date(), systemctl=fake_systemctl) == 0
    capsys.readouterr()
    assert status.command(week, None, True, NOW, None, utc("2025-11-24T00:00:00Z").date(),
                          utc("2025-11-28T00:00:00Z").date(), systemctl=fake_systemctl) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    rows = {(r["job"], s["session"]) for s in doc["sessions"] for r in s["jobs"]}
    html = page.read_text()
    assert not re.search(r"""(src|href)\s*=|url\(|@import|<script""", html), \
        "the page must load nothing from anywhere"

    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*browser, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Uncaught" not in dom.stderr and "Failed to load resource" not in dom.stderr
    cells = Cells()
    cells.feed(dom.stdout)
    assert set(cells.cells) == rows  # every (job, session) of status --json, nothing else
    assert cells.cells == EXPECTED
    assert "on ny4-a, 9.0 s" in dom.stdout  # the failed run: node and duration

    shot = tmp_path / "week-phone.png"
    done = subprocess.run([*browser, f"--screenshot={shot}", "--window-size=390,844",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 2000
    print(f"screenshot: {shot}")


def test_names_and_texts_are_escaped(week, fake_systemctl):
    fake_systemctl.now = NOW
    doc = status.collect(week, now=NOW, systemctl=fake_systemctl,
                         between=(utc("2025-11-24T00:00:00Z").date(), None))
    doc["sessions"][0]["jobs"][0]["alerts"] = [{"title": "<script>alert(1)</script>"}]
    html = statuspage.render(doc)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_the_dead_man_pass_refreshes_the_page_under_the_state_directory(week, fake_systemctl,
                                                                        monkeypatch):
    from market_timers.watch import deadman

    real = deadman.run_pass
    monkeypatch.setattr(deadman, "run_pass", lambda cfg, t: real(
        cfg, t, systemctl=fake_systemctl, alert=lambda *a, **k: None, env={}))
    monkeypatch.setattr(status, "Systemctl", lambda: fake_systemctl)
    fake_systemctl.now = NOW
    deadman.command(week, NOW)
    page = week.state_dir / statuspage.PAGE_FILE
    cells = Cells()
    cells.feed(page.read_text())
    assert cells.cells[("orders", "2025-11-25")] == "missed"
    assert oct(page.stat().st_mode & 0o777) == "0o644"


def test_a_paused_session_is_its_own_state_not_a_failure():
    row = {"job": "orders", "result": "paused", "fire_utc": "2025-11-26T20:50:00Z", "alerts": []}
    assert statuspage.cell_state(row) == "paused"
    assert statuspage.cell_state({**row, "result": "requires-unmet"}) == "refused"


def test_the_dead_man_refresh_does_not_build_the_exchange_calendars(week, fake_systemctl,
                                                                    monkeypatch):
    """The page is rewritten every minute: the calendar data-end warnings (which build the
    exchange calendars, pandas and all) are status's and the refresh's, not the page's."""
    def no(*a, **k):
        raise AssertionError("the page refresh built the calendars")

    monkeypatch.setattr(status, "status_warnings", no)
    monkeypatch.setattr(status, "Systemctl", lambda: fake_systemctl)
    fake_systemctl.now = NOW
    assert statuspage.refresh(week, NOW) == week.state_dir / statuspage.PAGE_FILE


def test_a_halted_session_is_its_own_state_not_a_failure():
    row = {"job": "orders", "result": "halted", "fire_utc": "2025-11-26T20:50:00Z", "alerts": []}
    assert statuspage.cell_state(row) == "halted"
    assert "halted" in dict(statuspage.STATES)
