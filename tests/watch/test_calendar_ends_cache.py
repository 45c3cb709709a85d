"""`status` tells where each calendar's data ends without building the calendars at every call
(issue 46: exchange_calendars and pandas are half a second of a `status --html`): what it found
is kept in `<state_dir>/calendar-ends.json` for the installed exchange_calendars. The warning a
user sees is the same whether it came from the file or from the calendars; a file of another
install, or corrupt, is ignored and written again, never a traceback."""

from __future__ import annotations

from datetime import timedelta

import pytest

from market_timers.schedule import calendars
from market_timers.watch import calendarends, status

from .test_calendar_end import XSHG, at, last  # noqa: F401  (the fixture)

CACHE = calendarends.FILE


@pytest.fixture
def built(monkeypatch):
    """The calendars each call really asked exchange_calendars about."""
    asked: list[str] = []
    real = calendars.last_session

    def counting(name):
        asked.append(name)
        return real(name)

    monkeypatch.setattr(calendars, "last_session", counting)
    return asked


def warnings(config, now):
    doc = status.collect(config, now=now, systemctl=_NoTimers())
    return doc["calendar_warnings"]


class _NoTimers:
    def show(self, units, props):
        return {}


@pytest.fixture
def synced(make_config, fake_systemctl, tmp_path, last):  # noqa: F811
    from market_timers.schedule import sync as sync_mod

    config = make_config(XSHG)
    now = at(last - timedelta(days=10))
    fake_systemctl.now = now
    sync_mod.sync(config, now=now, systemctl=fake_systemctl, stamp_dir=tmp_path / "stamps")
    return config, now


def test_the_second_status_reads_the_data_end_from_the_file_and_says_the_same(synced, built,
                                                                               last):  # noqa: F811
    config, now = synced
    first = warnings(config, now)
    assert len(first) == 1 and f"sessions up to {last} only" in first[0]
    assert built == ["XSHG"] and (config.state_dir / CACHE).is_file()
    assert warnings(config, now) == first
    assert built == ["XSHG"]  # not built again


def test_a_file_of_another_exchange_calendars_install_is_found_again(synced, built,
                                                                     monkeypatch):
    config, now = synced
    first = warnings(config, now)
    monkeypatch.setattr(calendars, "install_stamp", lambda: "9.9.9 1")  # an upgrade
    assert warnings(config, now) == first
    assert built == ["XSHG", "XSHG"]
    built.clear()
    assert warnings(config, now) == first and built == []  # the file was written again


@pytest.mark.parametrize("content", [
    b"\x00not json", b"[]", b'{"install": 3, "ends": "XSHG"}',
    b'{"install": "@", "ends": {"XSHG": ["XSHG", "not a date"]}}',
    b'{"install": "@", "ends": {"XSHG": 5}}',
])
def test_a_corrupt_file_is_ignored_and_written_again(synced, built, content):
    config, now = synced
    first = warnings(config, now)
    stamp = calendars.install_stamp()
    (config.state_dir / CACHE).write_bytes(content.replace(b"@", stamp.encode()))
    built.clear()
    assert warnings(config, now) == first and built == ["XSHG"]
    built.clear()
    assert warnings(config, now) == first and built == []


def test_a_calendar_that_does_not_build_is_said_at_every_call_and_not_kept(synced, monkeypatch):
    config, now = synced

    def broken(name):
        raise calendars.CalendarError("XSHG: cannot build this calendar")

    monkeypatch.setattr(calendars, "last_session", broken)
    said = "calendar XSHG: cannot tell where its data ends: XSHG: cannot build this calendar"
    assert warnings(config, now) == [said]
    assert warnings(config, now) == [said]
    assert not (config.state_dir / CACHE).exists()
