"""The event API: durable, readable by the processor whatever the caller's umask, never a partial
file, a fallback when the spool's disk fails, and light enough for a job to call."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from market_timers.events import spool
from market_timers.events.process import pending, read_event

ROOT = Path(__file__).resolve().parents[2]


def test_an_event_is_spooled_0640_even_under_a_strict_umask(tmp_path):
    d = tmp_path / "events"
    d.mkdir()
    old = os.umask(0o077)
    try:
        path = spool.write(spool.make_event("rejected", key="R1", text="no\nbuying power",
                                            value=3), [str(d)])
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert [p.name for p in d.iterdir()] == [Path(path).name]  # no temp file left
    event = read_event(Path(path))
    assert (event["kind"], event["key"], event["text"], event["value"]) == (
        "rejected", "R1", "no buying power", 3.0)


def test_names_sort_in_arrival_order(tmp_path):
    d = tmp_path / "e"
    d.mkdir()
    paths = [spool.write(spool.make_event("k", key=str(i)), [str(d)]) for i in range(30)]
    assert [str(p) for p in pending([str(d)])] == paths


@pytest.mark.parametrize("kind", ["", "Rejected", "9x", "a b", "x" * 41, None])
def test_a_bad_kind_is_the_callers_error(kind):
    with pytest.raises(ValueError, match="event kind"):
        spool.make_event(kind)


def test_bad_severity_or_value_is_refused():
    with pytest.raises(ValueError, match="severity"):
        spool.make_event("x", severity="urgent")
    with pytest.raises(ValueError, match="value"):
        spool.make_event("x", value="a lot")
    with pytest.raises(ValueError, match="finite"):
        spool.make_event("x", value=float("nan"))


def test_a_full_spool_disk_falls_back_to_run_and_leaves_no_partial_file(tmp_path, monkeypatch):
    primary, fallback = tmp_path / "spool", tmp_path / "run"
    primary.mkdir()
    fallback.mkdir()
    real_write = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(primary)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    path = spool.write(spool.make_event("disconnected"), [str(primary), str(fallback)])
    assert Path(path).parent == fallback
    assert list(primary.iterdir()) == []


def test_when_nothing_can_be_written_emit_says_so_on_stderr_and_returns_none(tmp_path,
                                                                            monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(spool.DIR_ENV, str(blocker / "events"))
    monkeypatch.setenv(spool.FALLBACK_ENV, str(blocker))
    assert spool.emit("rejected", key="R9", text="no funds") is None
    err = capsys.readouterr().err
    assert "NOT SPOOLED" in err and "rejected key=R9" in err and "no funds" in err


def test_jobnotify_event_is_import_light_and_never_raises_for_the_disk(tmp_path):
    d = tmp_path / "events"
    d.mkdir()
    code = ("import sys\nfrom market_timers import jobnotify\n"
            "ok = jobnotify.event('slippage_high', key='AAPL', value=4.5)\n"
            "heavy = [m for m in ('json', 'tomllib', 'pandas', 'exchange_calendars', "
            "'market_timers.alerts', 'market_timers.config.loader') if m in sys.modules]\n"
            "print(ok, heavy)\n")
    env = {**os.environ, spool.DIR_ENV: str(d), "MARKET_JOB": "signal",
           "MARKET_SESSION": "2025-11-28", "PYTHONPATH": str(ROOT / "generator")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "True []"
    [path] = d.iterdir()
    event = json.loads(path.read_text())
    assert (event["job"], event["session"], event["value"]) == ("signal", "2025-11-28", 4.5)
    env[spool.DIR_ENV] = "/proc/nope/events"
    env[spool.FALLBACK_ENV] = "/proc/nope"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "False []"
    assert "NOT SPOOLED" in done.stderr


def test_the_hand_written_json_reads_back_exactly(tmp_path):
    event = spool.make_event("x", key='a"b\\c', text="é ok \x01 \udcff", value=-2.5, job="j")
    path = spool.write(event, [str(tmp_path)])
    back = json.loads(Path(path).read_text())
    assert back == {**event, "text": "é ok \x01 ?"}


def test_the_shipped_gateway_example_spools_one_short_incident(tmp_path):
    env = {**os.environ, spool.DIR_ENV: str(tmp_path), "PYTHONPATH": str(ROOT / "generator")}
    out = subprocess.run([sys.executable, str(ROOT / "scripts/examples/gateway-events.py"),
                          "--demo"], env=env, capture_output=True, text=True, check=True).stdout
    assert "one short incident" in out
    kinds = [json.loads(p.read_text())["kind"] for p in sorted(tmp_path.iterdir())]
    assert kinds == ["heartbeat_lost", "disconnected", "reconnected"]
