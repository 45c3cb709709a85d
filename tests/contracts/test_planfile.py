"""plan.json through planfile: old files still read, a bad file is an error naming it, and sync
knows its timers' instants and calendars from it rather than from the unit files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from tests.schedule.test_sync import SIGNAL, WED, RecordingSystemctl, names

from market_timers.config import loader as config
from market_timers.contracts import planfile
from market_timers.schedule import render, sync
from market_timers.watch import fires

# A plan.json as the version before planfile.py wrote it (no timer_last_utc), one-shot, daily
# and periodic entries.
OLD = """{
 "fires": [
  {"calendar": "XNYS", "event": "close", "fire_local": "2025-11-26T15:45:00-05:00",
   "fire_utc": "2025-11-26T20:45:00Z", "grace_sec": 120, "job": "signal", "offset": "-15min",
   "session": "2025-11-26", "severity": "critical", "timeout_sec": 1800, "timezone": "EST",
   "unit": "market-signal@2025-11-26-204500.timer"},
  {"calendar": "UTC", "event": "at", "fire_local": "2025-11-26T23:59:00+00:00",
   "fire_utc": "2025-11-26T23:59:00Z", "grace_sec": 120, "job": "nightly", "offset": "+0s",
   "session": "2025-11-26", "severity": "warning", "timeout_sec": 1800, "timezone": "UTC",
   "unit": "market-nightly@daily.timer"},
  {"calendar": "XNYS", "event": "every", "every_sec": 60, "fire_local": "2025-11-27T09:35:00-05:00",
   "fire_utc": "2025-11-27T14:35:00Z", "first_utc": "2025-11-27T14:35:00Z", "grace_sec": 30,
   "job": "cycle", "last_utc": "2025-11-27T20:50:00Z", "offset": "+0s",
   "pause_utc": ["2025-11-27T17:00:00Z", "2025-11-27T18:00:00Z"], "session": "2025-11-27",
   "severity": "warning", "slot_count": 316, "timeout_sec": 50, "timezone": "EST",
   "unit": "market-cycle@2025-11-27-143500-abcdef.timer"}
 ],
 "generated_utc": "2025-11-26T12:00:00Z"
}
"""


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def test_a_plan_json_of_the_previous_version_reads_typed_and_unchanged(tmp_path):
    (tmp_path / "plan.json").write_text(OLD)
    doc = planfile.read(tmp_path)
    signal, nightly, cycle = doc.entries
    assert (signal.job, signal.session, signal.instant, signal.calendar) == (
        "signal", "2025-11-26", utc("2025-11-26T20:45:00Z"), "XNYS")
    assert (signal.grace, signal.timeout, signal.severity, signal.every) == (120, 1800,
                                                                            "critical", 0)
    assert signal.timer_last is None  # not recorded then: sync reads such a timer's file
    assert signal.unit == "market-signal@2025-11-26-204500.timer"
    assert nightly.calendar == "UTC" and nightly.last == nightly.instant
    assert (cycle.every, cycle.first, cycle.last, cycle.pause) == (
        60, utc("2025-11-27T14:35:00Z"), utc("2025-11-27T20:50:00Z"),
        (utc("2025-11-27T17:00:00Z"), utc("2025-11-27T18:00:00Z")))
    assert doc.generated_utc == "2025-11-26T12:00:00Z"
    assert doc.to_json() == json.loads(OLD)  # the readers of the dicts see the file as it is
    assert fires.read_plan(tmp_path) == json.loads(OLD)


def test_no_plan_json_is_none(tmp_path):
    assert planfile.read(tmp_path) is None and fires.read_plan(tmp_path) is None


@pytest.mark.parametrize(("text", "why"), [
    ("{not json", "not JSON"),
    ('["a list"]', "not a plan"),
    ('{"fires": {"job": "signal"}}', "not a plan"),
    ('{"fires": [{"job": "signal", "session": "2025-11-26", "fire_utc": "2025-11-26T20:45:00Z"},'
     ' {"job": "signal", "session": "2025-11-27"}]}', "fires[1]: not a planned fire"),
    ('{"fires": [{"job": "signal", "session": "2025-11-26", "fire_utc": "tomorrow"}]}',
     "fires[0]: not a planned fire"),
])
def test_a_bad_plan_json_is_an_error_naming_the_file(tmp_path, text, why):
    (tmp_path / "plan.json").write_text(text)
    with pytest.raises(planfile.PlanFileError) as e:
        planfile.read(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'plan.json'}: {why}")
    with pytest.raises(ValueError, match="plan.json"):  # the deadman's pass reports it
        fires.read_plan(tmp_path)


def test_write_then_read_round_trips_in_instant_order(tmp_path):
    (tmp_path / "plan.json").write_text(OLD)
    doc = planfile.read(tmp_path)
    planfile.write(tmp_path, utc("2025-11-27T00:00:00Z"), reversed(doc.entries))
    again = planfile.read(tmp_path)
    assert again.entries == doc.entries and again.generated_utc == "2025-11-27T00:00:00Z"
    assert [e.json for e in again.entries] == json.loads(OLD)["fires"]


@pytest.fixture
def setup(write_config):
    def make(text=SIGNAL):
        path = write_config(text)
        return path, config.load(path)

    return make


def synced(setup, tmp_path, now=WED):
    _, cfg = setup()
    sync.sync(cfg, now=now, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    return cfg


def test_sync_records_each_timers_last_elapse_as_rendered(setup, tmp_path):
    cfg = synced(setup, tmp_path)
    doc = planfile.read(cfg.state_dir)
    assert len(doc.entries) == 3
    for entry in doc.entries:
        timer = (cfg.unit_dir / entry.unit).read_text()
        assert entry.timer_last == render.timer_instant(timer)  # 2 s (the lead) early
        assert entry.timer_last == entry.instant - timedelta(seconds=2)


def test_sync_knows_its_timers_instant_from_plan_json_not_the_unit_file(setup, tmp_path):
    cfg = synced(setup, tmp_path)
    elapsed = cfg.unit_dir / "market-signal@2025-11-26-204500.timer"
    elapsed.write_text("\n".join(line for line in elapsed.read_text().splitlines()
                                 if not line.startswith("OnCalendar=")) + "\n")
    later = datetime(2025, 11, 29, 21, 0, tzinfo=UTC)
    result = sync.sync(cfg, now=later, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert elapsed.name in result.expired and elapsed.name not in result.removed


def test_sync_knows_a_removed_fires_calendar_from_plan_json(setup, write_config, tmp_path):
    cfg = synced(setup, tmp_path)
    service = cfg.unit_dir / "market-signal@2025-11-28-174500.service"
    service.write_text("\n".join(line for line in service.read_text().splitlines()
                                 if not line.startswith("Environment=MARKET_")) + "\n")
    cfg = config.load(write_config(SIGNAL + '[overrides.XNYS]\nclosed = ["2025-11-28"]\n'))
    result = sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    [change] = result.changes
    assert change.describe() == ("XNYS 2025-11-28: signal no longer planned "
                                 "(was 2025-11-28T17:45:00Z)")


def test_timers_of_an_older_plan_json_are_read_from_their_files(setup, write_config, tmp_path):
    """A plan.json without timer_last_utc (the version before): sync reads the unit files."""
    cfg = synced(setup, tmp_path)
    path = cfg.state_dir / "plan.json"
    doc = json.loads(path.read_text())
    for entry in doc["fires"]:
        del entry["timer_last_utc"]
    path.write_text(json.dumps(doc))
    cfg = config.load(write_config(SIGNAL + '[overrides.XNYS]\nclosed = ["2025-11-28"]\n'))
    result = sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    [change] = result.changes
    assert change.describe() == ("XNYS 2025-11-28: signal no longer planned "
                                 "(was 2025-11-28T17:45:00Z)")
    later = datetime(2025, 11, 29, 21, 0, tzinfo=UTC)
    result = sync.sync(cfg, now=later, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert result.expired == ["market-signal@2025-11-26-204500.timer"]
    assert "market-signal@2025-11-26-204500.timer" not in names(cfg.unit_dir)


def test_an_entry_kept_by_sync_keeps_keys_this_version_does_not_know(setup, tmp_path):
    cfg = synced(setup, tmp_path)
    path = cfg.state_dir / "plan.json"
    doc = json.loads(path.read_text())
    doc["fires"][0]["from_a_newer_version"] = 1
    path.write_text(json.dumps(doc))
    thu = datetime(2025, 11, 27, 12, 0, tzinfo=UTC)  # Wednesday's fire has passed: kept as is
    sync.sync(cfg, now=thu, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    [wed] = [e for e in planfile.read(cfg.state_dir).entries if e.session == "2025-11-26"]
    assert wed.json["from_a_newer_version"] == 1


def test_a_corrupt_plan_json_is_rewritten_by_sync(setup, tmp_path):
    _, cfg = setup()
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / "plan.json").write_text("{not json")
    sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert len(planfile.read(cfg.state_dir).entries) == 3


def test_planfile_imports_no_pandas():
    """The event processor and metrics read plan.json on every pass."""
    import subprocess
    import sys

    code = ("import sys, market_timers.contracts.planfile; "
            "print(sorted(m for m in ('pandas', 'numpy', 'exchange_calendars', 'jinja2') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


CYCLE = """\
calendar = "XNYS"
horizon = 2
[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-10min"
command = ["/bin/true"]
"""


def test_a_periodic_timers_last_elapse_is_its_last_slot(setup, tmp_path):
    cfg = synced(lambda: setup(CYCLE), tmp_path, now=datetime(2026, 12, 23, 22, 0, tzinfo=UTC))
    entries = planfile.read(cfg.state_dir).entries
    assert [e.session for e in entries] == ["2026-12-24", "2026-12-28"]
    for entry in entries:
        assert entry.timer_last == entry.last == \
            render.timer_instant((cfg.unit_dir / entry.unit).read_text())
    assert entries[0].last == datetime(2026, 12, 24, 17, 50, tzinfo=UTC)  # the early close
