"""Where each calendar's data ends, for `status`, kept in `<state_dir>/calendar-ends.json`.

Finding a calendar's last session imports exchange_calendars (pandas) and builds the calendar:
about half a second that `status` and `status --html` paid at every call for a warning that
changes only with the installed package (issue 46). The file holds, for one install of
exchange_calendars (calendars.install_stamp), each calendar name's canonical name and last
session (null: its holidays come from rules, no end). A file of another install, unreadable or
corrupt is ignored and written again; a calendar that does not build is not kept (its error is
said at every call). Written by whoever runs `status` and may write the state directory: it is
only a saving, never an error.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from market_timers.files import atomicfile, safefs
from market_timers.schedule import calendars

FILE = "calendar-ends.json"


def ends(state_dir, names) -> dict[str, tuple[str, date | None] | str]:
    """name -> (its canonical name, its last session or None), or the error text of a calendar
    that does not build."""
    stamp = calendars.install_stamp()
    kept = _load(Path(state_dir), stamp)
    out: dict[str, tuple[str, date | None] | str] = {}
    learnt = False
    for name in names:
        if name not in kept:
            try:
                canonical = calendars.resolve(name)
                kept[name] = (canonical, calendars.last_session(canonical))
                learnt = True
            except Exception as e:  # a calendar that does not build: said, not kept
                out[name] = str(e)
                continue
        out[name] = kept[name]
    if learnt:
        _save(Path(state_dir), stamp, kept)
    return out


def _load(state_dir: Path, stamp: str) -> dict[str, tuple[str, date | None]]:
    try:
        doc = json.loads(safefs.read_bytes(state_dir / FILE, base=state_dir))
        if doc.get("install") != stamp:
            return {}
        out = {}
        for name, (canonical, last) in doc["ends"].items():
            if not isinstance(canonical, str):
                raise TypeError(f"{name}: {canonical!r} is not a calendar name")
            out[name] = (canonical, date.fromisoformat(last) if last is not None else None)
        return out
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {}  # none yet, another install's, or corrupt: found again and written


def _save(state_dir: Path, stamp: str, kept: dict[str, tuple[str, date | None]]) -> None:
    doc = {"install": stamp, "ends": {name: [canonical, last.isoformat() if last else None]
                                      for name, (canonical, last) in kept.items()}}
    try:
        safefs.write_json(state_dir / FILE, doc, base=state_dir, mode=0o644,
                          sync=atomicfile.NONE)
    except (OSError, ValueError):  # read-only to this user (an operator's status): a saving only
        pass
