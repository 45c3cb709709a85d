"""No input stops the alert path (issue 24): crafted spool files that crashed every pass are set
aside, counted in one warning per pass, and the real critical event behind them is routed."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_timers.config.events import KIND
from market_timers.events import spool
from market_timers.events.process import drain, read_event

T0 = datetime(2025, 11, 13, 15, 0, tzinfo=UTC)


def poison(dirs, name: str, doc) -> Path:
    path = Path(dirs[0]) / f"{name}.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def good(**fields) -> dict:
    return spool.make_event("rejected", key="R9", at=T0.timestamp(), **fields)


VARIANTS = {
    "year-1": dict(good(), at="0001-01-01T00:00:00.000Z"),
    "year-9999": dict(good(), at="9999-12-31T23:59:59.000Z"),
    "huge-value": dict(good(), value=int("9" * 400)),
    # under the 64 KiB size limit, far deeper than the JSON parser's recursion
    "deep-nesting": '{"kind": "rejected", "at": "2025-11-13T15:00:00Z", "x": ' + "[" * 30000
                    + "]" * 30000 + "}",
    # an incident's and the digest's files are named after the session
    "long-session": dict(spool.make_event("heartbeat_lost", key="gw", at=T0.timestamp()),
                         session="2025-11-13" + "x" * 290),
}


def run(ctx, cfg, dirs, now=T0):
    ctx.now = lambda: now
    return drain(ctx, cfg.events, cfg.state_dir, dirs, now)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_poison_file_is_set_aside_and_the_critical_event_behind_it_is_routed(
        example, ctx_for, dirs, api, variant, monkeypatch):
    cfg = example()
    ctx = ctx_for(cfg)
    doc = VARIANTS[variant]
    if variant == "year-9999":  # through the public API, as a job would
        from market_timers import jobnotify

        monkeypatch.setenv("MARKET_EVENTS_DIR", dirs[0])
        assert jobnotify.event("heartbeat_lost", key="gw",  # opens an incident: its deadline
                               at=datetime(9999, 12, 31, 23, 59, tzinfo=UTC).timestamp())
    else:
        poison(dirs, "0000000000000000001-1-aa", doc)
    spool.write(spool.make_event("rejected", key="REAL", at=(T0 + timedelta(seconds=1)).timestamp()),
                dirs)
    run(ctx, cfg, dirs, T0 + timedelta(seconds=2))
    heads = [m["text"].splitlines()[0] for m in api.received("telegram")]
    assert "[CRITICAL] rejected REAL" in heads
    assert list(Path(dirs[0]).glob("*.json")) == []  # nothing left to crash the next pass


def test_thirty_malformed_files_are_one_warning_not_thirty(example, ctx_for, dirs, api):
    cfg = example()
    ctx = ctx_for(cfg)
    for i in range(30):
        poison(dirs, f"{i:019d}-1-aa", {"kind": "Bad kind"})
    run(ctx, cfg, dirs)
    bad = [m["text"] for m in api.received() if "malformed event file" in m["text"]]
    assert len(bad) == 1 and bad[0].startswith("[WARNING] 30 malformed event file(s) set aside")
    assert len(list(Path(dirs[0] + ".bad").iterdir())) == 30


def test_a_future_dated_event_is_taken_at_its_arrival_and_says_so(tmp_path):
    path = tmp_path / "e.json"
    path.write_text(json.dumps(dict(good(), at="2030-01-01T00:00:00.000Z")))
    arrival = datetime.fromtimestamp(os.stat(path).st_mtime, UTC)
    event = read_event(path, now=arrival + timedelta(seconds=1))
    assert event["clamped_from"] == "2030-01-01T00:00:00.000Z"
    assert abs(datetime.fromisoformat(event["at"].replace("Z", "+00:00")) - arrival) \
        < timedelta(milliseconds=2)


def test_an_event_older_than_ten_years_at_its_arrival_is_refused_a_replay_is_not(tmp_path):
    path = tmp_path / "e.json"
    path.write_text(json.dumps(dict(good(), at="2000-01-01T00:00:00.000Z")))
    with pytest.raises(ValueError, match="more than 10 years before"):
        read_event(path, now=datetime.now(UTC))
    path.write_text(json.dumps(dict(good(), at="2025-02-03T14:00:00.000Z")))  # a past stream
    assert read_event(path, now=datetime.now(UTC))["at"] == "2025-02-03T14:00:00.000Z"


def test_a_kind_with_a_trailing_newline_is_not_a_kind():
    assert KIND.match("rejected") and not KIND.match("rejected\n")


def test_an_at_the_clock_cannot_hold_is_a_bad_argument_not_a_crash():
    with pytest.raises(spool.EventError, match="at must be a POSIX time"):
        spool.make_event("rejected", at=float("inf"))


def test_incidents_process_routes_events_with_a_broken_config(tmp_path, api, creds, monkeypatch):
    from market_timers import cli
    from market_timers.channels.credentials import OVERRIDE

    monkeypatch.setenv(OVERRIDE, str(creds))
    config = tmp_path / "market-timers.toml"
    config.write_text(f"""
calendar = "XNYS"
state_dir = "{tmp_path}/state"
spool_dir = "{tmp_path}/spool"
runtime_dir = "{tmp_path}/run"

[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
grace = 60

[alerts]
repeat_minutes = 0

[alerts.telegram]
chat_id = "-1001"
api_base = "{api.base}"

[events]
severity = {{ rejected = "critical" }}
""")
    events = tmp_path / "spool" / "events"
    events.mkdir(parents=True)
    spool.write(spool.make_event("rejected", key="R1", at=T0.timestamp()), [str(events)])
    rc = cli.main(["--config", str(config), "--now", "2025-11-13T15:00:01Z", "incidents",
                   "process"])
    assert rc == 0
    heads = [m["text"].splitlines()[0] for m in api.received("telegram")]
    assert "[CRITICAL] rejected R1" in heads
    assert any(h.startswith("[CRITICAL] config ") for h in heads)  # and the break is told
