"""The counted history (metrics/history.py): tallies kept beside the file and only its new lines
parsed, and whatever happens to the file or to the note, the tallies of a full parse."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from market_timers import metrics
from market_timers.metrics import history as history_mod
from market_timers.metrics.history import History


@pytest.fixture
def state(tmp_path: Path) -> metrics.State:
    s = metrics.State(tmp_path / "state")
    s.dir.mkdir(parents=True)
    return s


def entry(i: int, job: str = "poll", kind: str = "ok") -> dict:
    return {"key": f"inv-{i}", "job": job, "session": "2025-11-26", "kind": kind}


def add(state, entries: list[dict], reread: bool = False) -> Counter:
    """One writer's turn: count, append, save; its tallies."""
    h = History(state, reread=reread)
    try:
        h.append([e for e in entries if not h.has(e["key"])])
        h.save()
        return Counter(h.tally)
    finally:
        h.close()


def full(state) -> Counter:
    """The tallies of a full parse of the file (the note ignored)."""
    h = History(state, reread=True)
    h.close()
    return Counter(h.tally)


def test_each_writer_parses_only_the_new_lines_and_counts_like_a_full_parse(state):
    add(state, [entry(i, kind="ok" if i % 3 else "failed") for i in range(50)])
    h = History(state)
    assert not h.full and h.known == set()  # nothing new: no line parsed
    assert h.has("inv-7") and not h.has("inv-70") and not h.has("inv-")
    h.close()
    tally = add(state, [entry(i) for i in range(45, 60)])  # 45..49 already counted
    assert tally == full(state) == Counter({("poll", "ok"): 43, ("poll", "failed"): 17})


def test_keys_are_found_as_written_whatever_their_characters(state):
    odd = ['a"b', "café|2025-11-26", "x\\y", "inv-1", "tab\there", "inv-1x"]
    add(state, [dict(entry(0), key=k) for k in odd[:-1]])
    h = History(state)
    assert [h.has(k) for k in odd] == [True] * 5 + [False]
    h.close()


@pytest.mark.parametrize("note", [
    "not json", "[]", '{"version": 2, "ino": INO, "offset": END, "counts": []}',
    '{"version": 1, "ino": "INO", "offset": END, "counts": []}',
    '{"version": 1, "ino": INO, "offset": -1, "counts": []}',
    '{"version": 1, "ino": INO, "offset": END, "counts": [["poll", "ok", -5]]}',
    '{"version": 1, "ino": INO, "offset": END, "counts": [["poll", "ok"]]}',
    '{"version": 1, "ino": INO, "offset": END, "counts": {"poll": 3}}',
])
def test_a_damaged_note_means_a_full_parse(state, note):
    add(state, [entry(i) for i in range(10)])
    st = os.stat(state.dir / history_mod.NAME)
    (state.dir / history_mod.NOTE).write_text(
        note.replace("INO", str(st.st_ino)).replace("END", str(st.st_size)))
    assert History(state).full
    assert add(state, [entry(i) for i in range(8, 12)]) == Counter({("poll", "ok"): 12})


def test_a_note_of_another_file_or_longer_than_the_file_means_a_full_parse(state):
    add(state, [entry(i) for i in range(10)])
    path = state.dir / history_mod.NAME
    lines = path.read_bytes().splitlines(keepends=True)
    path.unlink()
    path.write_bytes(b"".join(lines[:4]))  # replaced by a shorter file (a new inode)
    assert add(state, [entry(20)]) == Counter({("poll", "ok"): 5})
    with path.open("r+b") as f:
        f.truncate(len(b"".join(lines[:2])))  # shortened in place: the note is past its end
    assert add(state, [entry(21)]) == Counter({("poll", "ok"): 3}) == full(state)


def test_a_torn_last_line_stays_apart_and_uncounted(state):
    """A write cut short (disk full) leaves part of a line: the next line starts afresh."""
    add(state, [entry(i) for i in range(3)])
    with (state.dir / history_mod.NAME).open("ab") as f:
        f.write(b'{"job": "poll", "key": "inv-9')
    tally = add(state, [entry(3), entry(4, kind="killed")])
    assert tally == full(state) == Counter({("poll", "ok"): 4, ("poll", "killed"): 1})
    assert json.loads((state.dir / history_mod.NAME).read_text().splitlines()[-1]) == \
        entry(4, kind="killed")


def test_no_history_yet_and_the_first_lines(state):
    h = History(state)
    assert not h.has("inv-0") and h.tally == Counter()
    h.close()
    assert add(state, [entry(0)]) == Counter({("poll", "ok"): 1})
    assert json.loads((state.dir / history_mod.NOTE).read_text())["offset"] == \
        os.path.getsize(state.dir / history_mod.NAME)  # the file made now: counted whole
    assert not History(state).full


def test_a_symlink_in_place_of_the_history_is_not_followed(state, tmp_path):
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(json.dumps(entry(0)) + "\n")
    (state.dir / history_mod.NAME).symlink_to(elsewhere)
    with pytest.raises(OSError):
        History(state)
    assert elsewhere.read_text() == json.dumps(entry(0)) + "\n"


@pytest.mark.parametrize("bad", [
    b"[" * 100000 + b"]" * 100000,  # deeper than the JSON parser: RecursionError
    b'{"key": "k9", "job": "a", "n": ' + b"9" * 400 + b"}",  # a huge number still parses
    b'{"key": {"x": 1}, "job": "a"}',  # a key that is not a string
    b"\xff\xfe not UTF-8",
    b'{"key": "k8", "job": "a"',  # torn
])
def test_a_hostile_or_torn_line_is_skipped_and_the_update_goes_on(bad):
    good = b'{"job": "a", "key": "k1", "kind": "run"}\n'
    got = history_mod.entries(good + bad + b"\n" + good.replace(b"k1", b"k2"))
    keys = [e["key"] for e in got]
    assert keys[0] == "k1" and keys[-1] == "k2"
    assert all(isinstance(e["key"], str) for e in got)
