"""Lines about a job's session reach the journal with MARKET_JOB and MARKET_SESSION (as the job's
own lines do), so that `journalctl MARKET_JOB=...` also finds the dead-man's "missed" and the
alert layer's "spooled"/"delivered". Checked against a datagram socket speaking journald's native
protocol (the parser below follows systemd's documented format, not the code under test)."""

from __future__ import annotations

import logging
import socket
import struct

import pytest

from market_timers.contracts import journal


def parse(datagram: bytes) -> dict[str, str]:
    """journald's native format: KEY=value\\n, or KEY\\n + 64-bit LE length + value + \\n."""
    out, i = {}, 0
    while i < len(datagram):
        nl = datagram.index(b"\n", i)
        line = datagram[i:nl]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            i = nl + 1
        else:
            key = line
            (size,) = struct.unpack("<Q", datagram[nl + 1:nl + 9])
            value = datagram[nl + 9:nl + 9 + size]
            i = nl + 9 + size + 1
        out[key.decode()] = value.decode()
    return out


@pytest.fixture
def journald(tmp_path, monkeypatch):
    path = str(tmp_path / "journal.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    monkeypatch.setattr(journal, "SOCKET", path)
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    root = logging.getLogger("market_timers")
    added, level = journal.handler(), root.level
    root.addHandler(added)  # what journal.setup() installs (pytest's own handlers are there)
    root.setLevel(logging.INFO)
    yield sock
    root.removeHandler(added)
    root.setLevel(level)
    sock.close()


def test_a_line_about_a_session_carries_its_fields(journald, capsys):
    log = logging.getLogger("market_timers.watch")
    log.error("deadman: closing-orders (XNYS 2026-12-03) was due at ...\nsecond line",
              extra=journal.about("closing-orders", "2026-12-03"))
    entry = parse(journald.recv(65536))
    assert entry["MARKET_JOB"] == "closing-orders" and entry["MARKET_SESSION"] == "2026-12-03"
    assert entry["PRIORITY"] == "3" and entry["SYSLOG_IDENTIFIER"] == "market-timers"
    assert entry["MESSAGE"] == ("ERROR deadman: closing-orders (XNYS 2026-12-03) was due at ..."
                                "\nsecond line")
    assert "closing-orders" not in capsys.readouterr().err  # sent once, not also on stderr


def test_the_dead_man_miss_carries_the_fields(journald, make_config, fake_systemctl,
                                             monkeypatch):
    from datetime import UTC, datetime

    from market_timers.schedule import sync as sync_mod
    from market_timers.watch import deadman

    config = make_config('calendar = "XNYS"\n[[job]]\nname = "signal"\nevent = "close"\n'
                         'offset = "-15min"\ncommand = ["/bin/true"]\n')
    fake_systemctl.now = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=config.state_dir / "stamps")
    real = deadman.run_pass
    monkeypatch.setattr(deadman, "run_pass", lambda cfg, t: real(
        cfg, t, systemctl=fake_systemctl, alert=lambda *a, **k: None, env={}))
    deadman.command(config, datetime(2026, 12, 3, 12, 0, tzinfo=UTC))  # 12-02's run never came
    entries = []
    journald.settimeout(0.5)
    try:
        while True:
            entries.append(parse(journald.recv(65536)))
    except TimeoutError:
        pass
    missed = [e for e in entries if "has no run record" in e["MESSAGE"]]
    assert missed, entries
    assert {(e.get("MARKET_JOB"), e.get("MARKET_SESSION")) for e in missed} == {
        ("signal", "2026-12-02")}
