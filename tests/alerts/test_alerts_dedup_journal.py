"""The dedup window's store (alerts/state.py): a record appends one line, whatever the table's
size; every process sees the others' records; a torn or corrupt line costs only itself; the
compaction keeps what is still inside the window."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from market_timers.alerts import state as state_mod
from market_timers.alerts.state import AlertState

NOW = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)


def test_a_record_does_not_rewrite_the_table(tmp_path):
    store = AlertState(tmp_path)
    for i in range(300):
        store.dedup_record(f"key-{i}", f"id-{i}", NOW, 30)
    table = tmp_path / "alerts" / "dedup.json"
    before = os.stat(table).st_ino if table.exists() else None
    journal = tmp_path / "alerts" / "dedup.jsonl"
    size = journal.stat().st_size
    store.dedup_record("one-more", "id-x", NOW, 30)
    assert (os.stat(table).st_ino if table.exists() else None) == before
    assert journal.stat().st_size - size < 200  # one line, not a table of 300


def test_another_process_sees_the_record_and_the_hit(tmp_path):
    AlertState(tmp_path).dedup_record("failed:closing-orders", "a1", NOW, 30)
    other = AlertState(tmp_path)
    assert other.dedup_hit("failed:closing-orders", NOW + timedelta(minutes=5), 30) == "a1"
    third = AlertState(tmp_path)
    assert third.dedup_hit("failed:closing-orders", NOW + timedelta(minutes=6), 30) == "a1"
    assert third._dedup_table()["failed:closing-orders"]["count"] == 2
    assert AlertState(tmp_path).dedup_hit("failed:closing-orders",
                                          NOW + timedelta(minutes=31), 30) is None


def test_a_corrupt_line_costs_only_itself(tmp_path):
    store = AlertState(tmp_path)
    store.dedup_record("k1", "a1", NOW, 30)
    with open(tmp_path / "alerts" / "dedup.jsonl", "a") as f:
        f.write('{"k": "k2", "id": \n[1, 2]\n\xff\n{"k": 3}\n')
    store2 = AlertState(tmp_path)
    store2.dedup_record("k3", "a3", NOW, 30)
    fresh = AlertState(tmp_path)
    assert fresh.dedup_hit("k1", NOW, 30) == "a1"
    assert fresh.dedup_hit("k3", NOW, 30) == "a3"
    assert fresh.dedup_hit("k2", NOW, 30) is None


def test_compaction_keeps_the_window_and_drops_what_left_it(tmp_path, monkeypatch):
    monkeypatch.setattr(state_mod, "COMPACT_AFTER", 10)
    store = AlertState(tmp_path)
    store.dedup_record("old", "a-old", NOW - timedelta(hours=3), 30)
    for i in range(12):
        store.dedup_record(f"k{i}", f"a{i}", NOW, 30)
    fresh = AlertState(tmp_path)
    assert fresh.dedup_hit("k11", NOW, 30) == "a11"
    assert fresh.dedup_hit("k0", NOW, 30) == "a0"
    assert "old" not in fresh._dedup_table()
    assert (tmp_path / "alerts" / "dedup.json").exists()


def test_a_table_from_before_the_journal_still_counts(tmp_path):
    (tmp_path / "alerts").mkdir()
    (tmp_path / "alerts" / "dedup.json").write_text(
        '{"failed:signal": {"id": "a0", "sent": "2026-12-03T13:55:00Z", "count": 0}}')
    assert AlertState(tmp_path).dedup_hit("failed:signal", NOW, 30) == "a0"
