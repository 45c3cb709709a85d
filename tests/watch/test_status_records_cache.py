"""`status` and the status page read a run record again only when its key changed (issue 46: 7,000
records were half of a `status --html` at 1,000 jobs): what was read is kept in
`<state_dir>/status-records.json` with its key directory's mtime. What a user sees is the same
as when every record is read; a run recorded since shows at once; a corrupt file is ignored and
written again, never a traceback.

The Thanksgiving week of test_status_page.py (runs recorded on Monday to Wednesday)."""

from __future__ import annotations

import os
import time

import pytest

from market_timers.ledger import runrecord
from market_timers.watch import recordcache, status

from .test_status_page import NOW, week  # noqa: F401  (the fixture)


def age(state_dir, seconds: int = 3600) -> None:
    """The ledger's key directories as if their records were written an hour ago."""
    then = time.time() - seconds
    ledger = state_dir / "ledger"
    for job in ledger.iterdir():
        for key in job.iterdir():
            os.utime(key, (then, then))


def shown(config, fake_systemctl, capsys) -> str:
    assert status.command(config, None, True, NOW, systemctl=fake_systemctl,
                          since=NOW.date().replace(day=20)) == 0
    return capsys.readouterr().out


def test_a_second_status_reads_no_record_and_shows_the_same(week, fake_systemctl, capsys,  # noqa: F811
                                                             reads):
    age(week.state_dir)
    first = shown(week, fake_systemctl, capsys)
    assert sorted(set(reads)) == [("orders", "2025-11-24"), ("orders", "2025-11-26"),
                                  ("signal", "2025-11-24"), ("signal", "2025-11-25"),
                                  ("signal", "2025-11-26")]
    assert (week.state_dir / recordcache.FILE).is_file()
    reads.clear()
    assert shown(week, fake_systemctl, capsys) == first and reads == []


def test_a_run_recorded_since_shows_at_the_next_status(week, fake_systemctl, capsys,  # noqa: F811
                                                       reads):
    age(week.state_dir)
    assert '"result": "missed"' in shown(week, fake_systemctl, capsys)  # orders, Tuesday
    runrecord.update(week.state_dir, "orders", "2025-11-25", started_utc="2025-11-26T21:00:30Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=1)
    reads.clear()
    out = shown(week, fake_systemctl, capsys)
    assert reads == [("orders", "2025-11-25")]  # the one key that changed
    assert '"result": "missed"' not in out and '"started_utc": "2025-11-26T21:00:30Z"' in out


def test_a_record_written_just_now_is_read_again_not_kept(week, fake_systemctl, capsys,  # noqa: F811
                                                          reads):
    """A key's mtime is stamped by a coarse clock: a change in the same tick as the one read
    would leave the mtime as it was, so a key changed within the last seconds is not kept."""
    shown(week, fake_systemctl, capsys)
    reads.clear()
    shown(week, fake_systemctl, capsys)
    assert len(set(reads)) == 5


@pytest.mark.parametrize("content", [b"\x00garbage", b"[]", b'{"version": 1, "keys": []}',
                                     b'{"version": 1, "keys": {"signal/2025-11-24": 5}}',
                                     b'{"version": 1, "keys": {"signal/2025-11-24": [1, []]}}'])
def test_a_corrupt_file_is_ignored_and_written_again(week, fake_systemctl, capsys,  # noqa: F811
                                                     reads, content):
    age(week.state_dir)
    first = shown(week, fake_systemctl, capsys)
    (week.state_dir / recordcache.FILE).write_bytes(content)
    assert shown(week, fake_systemctl, capsys) == first
    reads.clear()
    assert shown(week, fake_systemctl, capsys) == first and reads == []
