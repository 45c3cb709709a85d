"""The counted history (`<state_dir>/metrics/history.jsonl`, append-only: one line per finished run
and per missed session), read without parsing all of it at every update.

Why: the file gains a line per run, and a periodic job's runs are never pruned from it (their
ledger keys are): an every-minute job adds about 98,000 lines a year, and parsing them all at
every update (after each run and each minute's dead-man pass) cost about 0.8 s a year's worth.

Instead the tallies (how many lines per job and kind) are kept in `metrics/counts.json` with the
byte offset they count up to and the file's inode; an update parses only the lines after that
offset. "Is this run already counted?" (the few runs a ledger scan read again) is a search of the
file's bytes (mmap) for the line's key as this module writes it (`"key": <JSON string>, ` with
sorted keys: a key inside another value is escaped and cannot match).

The whole file is parsed (as before) when counts.json is missing, damaged, of another file or
longer than the file, and whenever the ledger scan reads everything (scan.py: once a day): the
tallies are then recounted from the lines, whatever the note said.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
from collections import Counter

NAME = "history.jsonl"
NOTE = "counts.json"
VERSION = 1


class History:
    """The history's tallies per (job, kind) and whether a key is in it; append() adds lines.
    Used under the metrics lock (State.lock), one writer at a time."""

    def __init__(self, state, *, reread: bool = False):
        self.state = state
        self.path = state.dir / NAME
        self.tally: Counter[tuple[str, str]] = Counter()
        self.known: set[str] = set()  # the keys of the lines parsed now
        self.full = True
        self._map: mmap.mmap | None = None
        self._ino, self._offset = 0, 0
        note = None if reread else _note(state.read(NOTE))
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            st = os.fstat(fd)
            self._ino = st.st_ino
            start = 0
            if note is not None and note["ino"] == st.st_ino and note["offset"] <= st.st_size:
                self.full, start = False, note["offset"]
                self.tally.update({(j, k): n for j, k, n in note["counts"]})
            if st.st_size:
                self._map = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
            self._offset = start + self._parse(start)
        finally:
            os.close(fd)

    def _parse(self, start: int) -> int:
        """Count the lines from `start` (a torn one does not parse); how many bytes they take."""
        if self._map is None:
            return 0
        data = self._map[start:]
        for entry in entries(data):
            self.known.add(str(entry["key"]))
            self.tally[(str(entry["job"]), str(entry.get("kind", "")))] += 1
        return len(data)

    def has(self, key: str) -> bool:
        if key in self.known or self.full or self._map is None:
            return key in self.known
        needle = b'"key": ' + json.dumps(key).encode() + b", "
        return self._map.find(needle) >= 0

    def append(self, entries: list[dict]) -> None:
        """Add lines (durable before this returns) and count them."""
        if not entries:
            return
        data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries).encode()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o640)
        try:
            st = os.fstat(fd)
            if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                data = b"\n" + data  # after a torn write: that line stays apart, uncounted
            os.write(fd, data)
            os.fsync(fd)
            # Every byte counted (the file parsed, or made just now): the note goes on.
            if st.st_size == self._offset and (st.st_ino == self._ino or not self._ino):
                self._ino = st.st_ino
                self._offset = os.fstat(fd).st_size
            else:  # the file is not the one parsed (made now, replaced, torn): next, reread
                self._ino, self._offset = 0, 0
        finally:
            os.close(fd)
        for e in entries:
            self.known.add(e["key"])
            self.tally[(e["job"], e.get("kind", ""))] += 1

    def save(self) -> None:
        """Keep the tallies and what they count up to (nothing when that is unknown)."""
        if not self._ino:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.state.dir / NOTE)
            return
        self.state.write(NOTE, {"version": VERSION, "ino": self._ino, "offset": self._offset,
                                "counts": sorted([j, k, n] for (j, k), n in self.tally.items())})

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def entries(data: bytes) -> list[dict]:
    """The history's lines that parse as entries; a torn, foreign or hostile line does not (not
    JSON, not UTF-8, nested deeper than the parser goes: RecursionError is no ValueError; a key
    or job that is not a string), and every update goes on without it."""
    out = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError, RecursionError):
            entry = json.loads(line)
            if isinstance(entry, dict) and isinstance(entry.get("key"), str) and entry["key"] \
                    and isinstance(entry.get("job"), str) and entry["job"] \
                    and isinstance(entry.get("kind", ""), str):
                out.append(entry)
    return out


def _note(doc: dict) -> dict | None:
    try:
        ok = (doc.get("version") == VERSION and isinstance(doc["ino"], int)
              and isinstance(doc["offset"], int) and doc["offset"] >= 0
              and all(isinstance(j, str) and isinstance(k, str) and isinstance(n, int)
                      and n >= 0 for j, k, n in doc["counts"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        ok = False
    return doc if ok else None
