"""`render --out DIR` writes each unit atomically (temp file + rename) and makes the batch durable
with one flush of the file system at the end, not one fsync per file; a failed flush is a failed
render."""

from __future__ import annotations

import errno
import os

from market_timers import cli
from market_timers.files import atomicfile
from market_timers.schedule import render

JOBS = """
calendar = "XNYS"
horizon = 20
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
[[job]]
name = "prep"
event = "open"
offset = "-30min"
command = ["/usr/bin/true"]
"""
NOW = "2025-11-26T12:00:00Z"


def test_many_units_are_written_with_one_flush_and_no_fsync_per_file(write_config, tmp_path,
                                                                      monkeypatch, capsys):
    fsyncs, flushes = [], []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    real_syncfs = atomicfile._syncfs
    monkeypatch.setattr(atomicfile, "_syncfs", lambda fd: (flushes.append(fd), real_syncfs(fd))[1])
    out = tmp_path / "out"
    args = ["--config", str(write_config(JOBS)), "--now", NOW, "render", "--out", str(out)]
    assert cli.main(args) == 0
    assert "80 units for 40 fires" in capsys.readouterr().out
    assert len(list(out.glob("market-*@*"))) == 80
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temp file left
    assert len(flushes) == 1 and len(fsyncs) == 1  # syncfs, then the directory's fsync


def test_a_failed_flush_fails_the_render(write_config, tmp_path, monkeypatch, capsys):
    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomicfile, "_syncfs", eio)
    out = tmp_path / "out"
    args = ["--config", str(write_config(JOBS)), "--now", NOW, "render", "--out", str(out)]
    assert cli.main(args) == 1
    captured = capsys.readouterr()
    assert f"cannot write into {out}: Input/output error" in captured.err
    assert "wrote" not in captured.out


def test_a_single_file_is_fsynced_before_its_rename_and_its_directory_after(tmp_path,
                                                                              monkeypatch):
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd))[1])
    assert render.write_atomic(tmp_path / "a.timer", "x\n") is True
    assert (tmp_path / "a.timer").read_text() == "x\n"
    [temp, directory] = fsyncs  # atomicfile.DURABLE, the default
    assert temp.startswith(str(tmp_path / ".a.timer.")) and directory == str(tmp_path)
    assert render.write_atomic(tmp_path / "a.timer", "x\n") is False  # unchanged: untouched
    assert len(fsyncs) == 2
