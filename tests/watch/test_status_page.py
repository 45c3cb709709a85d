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


def test_the_dead_man_pass_refreshes_the_page_in_its_own_directory_not_the_state_one(
        week, fake_systemctl, monkeypatch):
    """page_dir holds the page only: a web server's user reads it there, never the state."""
    from market_timers.watch import deadman

    real = deadman.run_pass
    monkeypatch.setattr(deadman, "run_pass", lambda cfg, t: real(
        cfg, t, systemctl=fake_systemctl, alert=lambda *a, **k: None, env={}))
    monkeypatch.setattr(status, "Systemctl", lambda: fake_systemctl)
    fake_systemctl.now = NOW
    week.page_dir.mkdir()
    deadman.command(week, NOW)
    page = week.page_dir / statuspage.PAGE_FILE
    cells = Cells()
    cells.feed(page.read_text())
    assert cells.cells[("orders", "2025-11-25")] == "missed"
    assert oct(page.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in week.page_dir.iterdir()] == ["status.html"]  # no temp file left
    assert not (week.state_dir / statuspage.PAGE_FILE).exists()


def test_a_configured_page_dir_that_is_missing_is_logged_and_the_default_one_is_not(
        make_config, fake_systemctl, caplog, tmp_path):
    config = make_config(THANKSGIVING_CONFIG)
    assert statuspage.refresh(config, NOW) is None
    assert "page_dir" in caplog.text and f"{tmp_path}/www" in caplog.text
    caplog.clear()
    config.raw.pop("page_dir")  # the default: made by the package, absent from a venv install
    assert statuspage.refresh(config, NOW) is None and caplog.text == ""


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
    week.page_dir.mkdir()
    assert statuspage.refresh(week, NOW) == week.page_dir / statuspage.PAGE_FILE


def test_a_halted_session_is_its_own_state_not_a_failure():
    row = {"job": "orders", "result": "halted", "fire_utc": "2025-11-26T20:50:00Z", "alerts": []}
    assert statuspage.cell_state(row) == "halted"
    assert "halted" in dict(statuspage.STATES)


# The page as a desk screen (issue 42, item 1) -------------------------------------------------

class Page(HTMLParser):
    """The cells in document order, the banners' text and each session header's text."""

    def __init__(self):
        super().__init__()
        self.order: list[tuple[str, str, str]] = []  # (session, job, state)
        self.texts: dict[tuple[str, str], str] = {}
        self.banners: list[str] = []
        self.headers: dict[str, str] = {}
        self._in: list = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td" and "data-job" in a:
            self.order.append((a["data-session"], a["data-job"], a["data-state"]))
            self._in.append(("cell", (a["data-job"], a["data-session"])))
        elif "banner" in (a.get("class") or "").split():
            self._in.append(("banner", len(self.banners)))
            self.banners.append("")
        elif tag == "h2" and "data-session" in a:
            self._in.append(("header", a["data-session"]))
            self.headers[a["data-session"]] = ""

    def handle_endtag(self, tag):
        if self._in and tag in ("td", "div", "h2", "p"):
            self._in.pop()

    def handle_data(self, data):
        for kind, key in self._in:
            if kind == "cell":
                self.texts[key] = self.texts.get(key, "") + data
            elif kind == "banner":
                self.banners[key] += data
            else:
                self.headers[key] += data


def desk_page(week, fake_systemctl, tmp_path, capsys, halt: bool = True) -> str:
    from market_timers.controls import halt as halt_mod

    class NothingRuns:
        def running(self, patterns):
            return []

    if halt:
        assert halt_mod.halt(week, "orders", None, False, "broker runaway",
                             utc("2025-11-26T20:55:00Z"), systemctl=NothingRuns()) == 0
    fake_systemctl.now = NOW
    page = tmp_path / "desk.html"
    assert status.command(week, None, False, NOW, str(page), utc("2025-11-24T00:00:00Z").date(),
                          utc("2025-12-01T00:00:00Z").date(), systemctl=fake_systemctl) == 0
    capsys.readouterr()
    return page.read_text()


def test_the_page_has_a_banner_for_the_halt_and_its_cells_say_halted(week, fake_systemctl,
                                                                    tmp_path, capsys):
    parsed = Page()
    parsed.feed(desk_page(week, fake_systemctl, tmp_path, capsys))
    [banner] = parsed.banners
    assert "HALTED" in banner and "job orders" in banner and "broker runaway" in banner
    assert "2025-11-26T20:55:00Z" in banner and "market-timers resume orders" in banner
    states = {(s, j): st for s, j, st in parsed.order}
    assert states[("2025-11-28", "orders")] == "halted"  # still to come: the halt refuses it
    assert states[("2025-11-26", "orders")] == "ok"  # ran before the halt: as it was
    assert states[("2025-11-28", "signal")] == "scheduled"


def test_the_page_shows_the_days_order_exchange_time_and_the_early_close(week, fake_systemctl,
                                                                        tmp_path, capsys):
    parsed = Page()
    parsed.feed(desk_page(week, fake_systemctl, tmp_path, capsys, halt=False))
    friday = [j for s, j, _ in parsed.order if s == "2025-11-28"]
    assert friday == ["signal", "orders"]  # 12:45 then 12:50, not alphabetical
    assert "12:45 EST" in parsed.texts[("signal", "2025-11-28")]
    assert "17:45Z" in parsed.texts[("signal", "2025-11-28")]
    assert "Fri" in parsed.headers["2025-11-28"]
    assert "closes early at 13:00 EST" in parsed.headers["2025-11-28"]
    assert "today" in parsed.headers["2025-11-26"] and "today" not in parsed.headers["2025-11-28"]


def test_the_page_tells_its_own_health_and_the_journal_command(week, fake_systemctl, tmp_path,
                                                              capsys):
    html = desk_page(week, fake_systemctl, tmp_path, capsys, halt=False)
    assert "plan synced 2025-11-21T22:00:00Z" in html
    assert "journalctl MARKET_JOB=orders MARKET_SESSION=2025-11-24" in html  # the failed run
    from market_timers.watch import deadman  # noqa: F401

    written = statuspage.render({"now": "2025-11-26T21:00:00Z", "sessions": []},
                                deadman_pass="2025-11-26T21:00:00Z")
    assert "last dead-man pass 2025-11-26T21:00:00Z" in written


def test_the_pages_health_tells_the_pending_alerts_and_the_oldests_age(week, fake_systemctl):
    """An outbox that is not emptying is the page's own health: how many wait, since when."""
    from market_timers.alerts.model import UNDELIVERABLE, Alert
    from market_timers.alerts.outbox import Outbox

    box = Outbox(week.spool_dir)
    for n, (created, state) in enumerate([("2025-11-26T20:35:00Z", "pending"),
                                          ("2025-11-26T20:55:00Z", "pending"),
                                          ("2025-11-26T19:00:00Z", UNDELIVERABLE)]):
        box.put(Alert(id=f"1126-0a0b0c0{n}", kind="failed", severity="critical", key=f"k{n}",
                      job="orders", session="2025-11-26", title="orders failed", text="x",
                      chain=["telegram"], created=created, state=state))
    fake_systemctl.now = NOW
    doc = status.collect(week, now=NOW, systemctl=fake_systemctl,
                         between=(utc("2025-11-26T00:00:00Z").date(), None))
    assert doc["outbox"]["oldest_pending_utc"] == "2025-11-26T20:35:00Z"
    html = statuspage.render(doc, deadman_pass="2025-11-26T21:00:00Z")
    assert ("Outbox: 2 pending, the oldest for 25 min (since 2025-11-26T20:35:00Z), "
            "1 undeliverable.") in html
    empty = statuspage.render({"now": "2025-11-26T21:00:00Z", "sessions": []})
    assert "Outbox: 0 pending, 0 undeliverable." in empty


def test_a_cell_says_whether_its_alert_went_out_or_was_folded():
    row = {"job": "signal", "result": "exit-code", "exit_status": "3", "attempts": 1,
           "fire_utc": "2025-11-26T20:45:00Z", "fire_local": "2025-11-26T15:45:00-05:00",
           "timezone": "EST",
           "alerts": [{"kind": "failed", "title": "signal failed", "handling": "deduplicated"}]}
    html = statuspage.render({"now": "2025-11-26T21:00:00Z",
                              "sessions": [{"session": "2025-11-26", "jobs": [row]}]})
    assert "signal failed (folded into an earlier alert)" in html
    row["alerts"][0]["handling"] = "alert"
    html = statuspage.render({"now": "2025-11-26T21:00:00Z",
                              "sessions": [{"session": "2025-11-26", "jobs": [row]}]})
    assert "signal failed (sent)" in html


SEVEN_DAYS = """
[[job]]
name = "crypto-rebalance"
calendar = "24/7"
event = "close"
offset = "-5min"
command = ["/bin/true"]
"""


@pytest.mark.parametrize("width", [1400, 390])
def test_several_calendars_never_scroll_sideways(make_config, fake_systemctl, chromium, tmp_path,
                                                 width):
    """A 24/7 job beside the XNYS jobs: a fortnight of sessions, no horizontal scroll."""
    config = make_config(CONFIG + SEVEN_DAYS)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    fake_systemctl.now = NOW
    page = tmp_path / "wide.html"
    assert status.command(config, None, False, NOW, str(page), systemctl=fake_systemctl) == 0
    # The page has no script; a copy measures itself for the test: the document's width, and
    # the widest overflow of any element (a box that scrolls sideways inside the page).
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>document.body.setAttribute('data-scroll', "
        "document.documentElement.scrollWidth + 'x' + window.innerWidth + 'x' + Math.max(0, "
        "...[...document.querySelectorAll('body *')].map(e => e.scrollWidth - e.clientWidth)))"
        "</script></body>"))
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900"]
    dom = subprocess.run([*browser, "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    scroll, inner, inside = map(int, re.search(r'data-scroll="(\d+)x(\d+)x(\d+)"',
                                               dom.stdout).groups())
    assert scroll <= inner, f"the page is {scroll} px wide in a {inner} px window"
    assert inside == 0, f"a box of the page scrolls sideways by {inside} px"
    shot = tmp_path / f"wide-{width}.png"
    subprocess.run([*browser, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=120)
    print(f"screenshot: {shot}")


def test_a_cell_says_a_run_was_started_by_hand_and_not_its_lateness(week, fake_systemctl):
    from market_timers import ledger
    from market_timers.ledger.local import LocalLedger

    book = LocalLedger(str(week.state_dir))
    key = ledger.Key("orders", "2025-11-25")  # missed by its timer, run by hand on Saturday
    book.claim(key, "operator", {"host": "ny4-a", "by": "alice", "invocation": "i1",
                                 "started_utc": "2025-11-29T10:00:00Z", "late_sec": 307800.0})
    book.finish(key, "i1", {"result": "success", "exit_status": "0", "duration_sec": 2})
    fake_systemctl.now = NOW
    doc = status.collect(week, now=NOW, systemctl=fake_systemctl,
                         between=(utc("2025-11-25T00:00:00Z").date(),
                                  utc("2025-11-25T00:00:00Z").date()))
    parsed = Page()
    parsed.feed(statuspage.render(doc))
    text = parsed.texts[("orders", "2025-11-25")]
    assert "started by operator alice" in text and "late" not in text
