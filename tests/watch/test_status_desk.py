"""`market-timers status` answers in one screen (issue 42, item 2): today's session and the next
one, in the day's order, exchange time beside UTC, the halts and pauses first and the rows they
hold marked."""

from __future__ import annotations

import pytest

from market_timers import cli
from market_timers.schedule import sync as sync_mod
from market_timers.watch import status

from .conftest import utc

DESK = """
calendar = "XNYS"
horizon = 10
[[job]]
name = "statement"
event = "close"
offset = "+30min"
command = ["/bin/true"]
[[job]]
name = "connect"
event = "open"
offset = "-30min"
command = ["/bin/true"]
[[job]]
name = "reconcile"
event = "open"
offset = "-30min"
command = ["/bin/true"]
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
timeout = "4min"
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/bin/true"]
orders = true
requires = ["signal"]
"""
NOW = utc("2025-11-26T15:00:00Z")  # Wednesday, the market open; Thursday is Thanksgiving


@pytest.fixture
def desk(make_config, fake_systemctl, tmp_path):
    config = make_config(DESK)
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    fake_systemctl.now = NOW
    return config


def status_text(config, systemctl, capsys, **kw) -> list[str]:
    assert status.command(config, None, False, NOW, systemctl=systemctl, **kw) == 0
    return capsys.readouterr().out.splitlines()


def rows(lines: list[str]) -> list[tuple[str, str]]:
    """(session date, job) of each table row."""
    return [(line.split()[1], line.split()[2]) for line in lines
            if line[:3] in ("Mon", "Tue", "Wed", "Thu", "Fri")]


def test_status_shows_today_and_the_next_session_in_the_days_order(desk, fake_systemctl,
                                                                    capsys):
    lines = status_text(desk, fake_systemctl, capsys)
    day = ["connect", "reconcile", "signal", "closing-orders", "statement"]
    assert rows(lines) == [("2025-11-26", j) for j in day] + [("2025-11-28", j) for j in day]
    assert len(lines) <= 20


def test_status_rows_give_the_weekday_exchange_time_and_utc(desk, fake_systemctl, capsys):
    lines = status_text(desk, fake_systemctl, capsys)
    [signal] = [x for x in lines if "2025-11-28" in x and " signal " in x]
    assert signal.split()[:5] == ["Fri", "2025-11-28", "signal", "12:45", "EST"]
    assert "17:45Z" in signal
    note = next(x for x in lines if "closes early" in x)
    assert "Fri 2025-11-28" in note and "13:00 EST" in note


def test_status_week_and_from_to_show_more_sessions(desk, fake_systemctl, capsys):
    sessions = {s for s, _ in rows(status_text(desk, fake_systemctl, capsys, week=True))}
    assert sessions == {"2025-11-26", "2025-11-28", "2025-12-01", "2025-12-02"}
    sessions = {s for s, _ in rows(status_text(desk, fake_systemctl, capsys,
                                               since=utc("2025-11-24T00:00:00Z").date(),
                                               until=utc("2025-11-25T00:00:00Z").date()))}
    assert sessions == {"2025-11-24", "2025-11-25"}


def test_status_puts_the_halt_first_and_marks_the_rows_it_holds(desk, fake_systemctl, capsys):
    path = desk.source
    assert cli.main(["--config", str(path), "--now", "2025-11-26T15:00:00Z", "halt", "--reason",
                     "broker runaway"]) in (0, 1)  # 1: no systemd here to stop units with
    capsys.readouterr()
    lines = status_text(desk, fake_systemctl, capsys)
    assert lines[0].startswith("halted: order jobs") and "broker runaway" in lines[0]
    assert "market-timers resume --orders" in lines[0]
    table = [x for x in lines if x[:3] in ("Wed", "Fri")]
    held = [x for x in table if " closing-orders " in x]
    assert len(held) == 2 and all("halted: scheduled" in x for x in held)
    assert not any("halted" in x for x in table if " signal " in x)


def test_status_command_line_takes_week(desk, fake_systemctl, capsys, monkeypatch):
    monkeypatch.setattr(status, "Systemctl", lambda: fake_systemctl)
    assert cli.main(["--config", str(desk.source), "--now", "2025-11-26T15:00:00Z", "status",
                     "--week"]) == 0
    assert "Tue 2025-12-02" in capsys.readouterr().out


def test_status_of_a_session_before_the_install_reads_the_ledger(desk, fake_systemctl, capsys):
    """The plan starts at the install; a session run before it (another host, an older config)
    is still in the run ledger, and `status --session` and the page show it."""
    from market_timers import ledger
    from market_timers.ledger.local import LocalLedger

    book = LocalLedger(str(desk.state_dir))
    key = ledger.Key("signal", "2025-11-20")
    book.claim(key, "timer", {"host": "ny4-a", "invocation": "i1",
                              "scheduled_utc": "2025-11-20T20:45:00Z",
                              "started_utc": "2025-11-20T20:45:00Z"})
    book.finish(key, "i1", {"result": "success", "exit_status": "0", "duration_sec": 3})
    assert status.command(desk, utc("2025-11-20T00:00:00Z").date(), False, NOW,
                          systemctl=fake_systemctl) == 0
    lines = capsys.readouterr().out.splitlines()
    [row] = [x for x in lines if x.startswith("Thu 2025-11-20")]
    assert row.split()[2] == "signal" and "success" in row and "20:45Z" in row
    assert status.command(desk, None, False, NOW, since=utc("2025-11-19T00:00:00Z").date(),
                          until=utc("2025-11-24T00:00:00Z").date(), systemctl=fake_systemctl) == 0
    sessions = {x.split()[1] for x in capsys.readouterr().out.splitlines()
                if x[:3] in ("Mon", "Thu")}
    assert sessions == {"2025-11-20", "2025-11-24"}
