"""High 3: a full spool filesystem must not drop critical alerts.

With spool_dir on a full tmpfs, raise_alert hit ENOSPC and returned: nothing was sent and a
0-byte .tmp file was left. Now the alert is delivered directly (once, best effort) with the spool
failure said in the same message, and no partial file is left.
"""

from __future__ import annotations

import errno
import os

import pytest

from market_timers.alerts.api import raise_alert
from market_timers.alerts.context import AlertContext
from market_timers.files import atomicfile


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.is_file() and p.name != ".lock") \
        if directory.exists() else []


def test_injected_enospc_delivers_directly_and_leaves_no_partial_file(make_ctx, api,
                                                                      monkeypatch, tmp_path):
    ctx = make_ctx()
    real = atomicfile._write_all

    def full(fd, data):
        if str(tmp_path / "spool") in os.readlink(f"/proc/self/fd/{fd}"):
            os.write(fd, data[: len(data) // 2])  # half written, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(atomicfile, "_write_all", full)
    alert = raise_alert(ctx, kind="failed", job="signal", session="2026-11-30", text="boom",
                        details={"status": "3"})
    assert alert is not None
    [msg] = api.received("telegram")
    assert "signal failed with exit status 3" in msg["text"]
    assert "outbox could not save this alert (No space left on device" in msg["text"]
    assert leftovers(tmp_path / "spool") == []


def test_spool_failure_without_any_working_channel_is_logged(make_ctx, api, monkeypatch, caplog,
                                                             tmp_path):
    ctx = make_ctx()
    api.fail_next("telegram", 500, times=5)
    api.fail_next("slack", 500, times=5)

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomicfile, "_write_all", full)
    raise_alert(ctx, kind="failed", job="signal", text="boom")
    assert "NOR delivered" in caplog.text
    assert leftovers(tmp_path / "spool") == []


@pytest.fixture
def full_tmpfs(small_tmpfs, fill_up):
    """The spool directory on a tmpfs with not one byte free (the small_tmpfs of conftest)."""
    (small_tmpfs / "outbox").mkdir()
    fill_up(small_tmpfs / "filler")
    return small_tmpfs


def test_real_full_tmpfs_spool_delivers_directly(full_tmpfs, make_ctx, api, tmp_path):
    ctx = make_ctx()
    assert isinstance(ctx, AlertContext) and ctx.spool_dir == full_tmpfs
    alert = raise_alert(ctx, kind="watchdog", job="signal", session="2026-11-30")
    assert alert is not None
    [msg] = api.received("telegram")
    assert "signal hung" in msg["text"] and "No space left on device" in msg["text"]
    assert leftovers(full_tmpfs / "outbox") == []
    assert not [p for p in full_tmpfs.rglob("*.tmp*")]
