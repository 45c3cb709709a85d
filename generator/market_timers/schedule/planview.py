"""What `market-timers plan` prints: the human table, or the JSON array (`--json`).

A periodic job's (job, session) is one row of the table, its first and last slot and their count
(`--slots`: a row per slot); `--json` has an entry per slot.

Both are written entry by entry as they are formatted (a plan of every calendar over ten years is
some 345,000 fires, 100 MB of JSON): never the whole text in memory at once.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import TextIO

from market_timers.contracts.instants import iso
from market_timers.schedule.plan import Fire
from market_timers.schema.durations import format_offset

HEADER = ("JOB", "CALENDAR", "SESSION", "EVENT", "UTC", "EXCHANGE LOCAL")
EMPTY = "no fires planned in this window"
CHUNK = 2000  # entries per write: fewer calls into the stream, little text held

# What json.dumps writes for a str with its default ensure_ascii=True (the C encoder).
_string = json.encoder.encode_basestring_ascii


_keys: dict[str, str] = {}


def _key(name: str) -> str:
    """The indented key and colon of a member: the same nine for every entry."""
    return _keys.setdefault(name, f"    {_string(name)}: ")


def _event(f: Fire) -> str:
    return "daily" if f.is_daily else f"{f.event} {format_offset(f.offset)}"


def write_table(out: TextIO, fires: Collection[Fire], slots: bool = False) -> None:
    """The table, column widths from a first pass over the fires (the last column is not
    padded: each line is stripped at its end). `fires` is iterated twice. A periodic job: one
    row per session, or with `slots` one per slot."""
    if not fires:
        out.write(EMPTY + "\n")
        return
    if any(f.is_periodic or f.why for f in fires):  # a few thousand rows at most; WHY column
        out.write((_slot_table(fires) if slots else _session_table(fires)) + "\n")
        return
    kinds = {(f.job, f.calendar, f.event, f.offset, f.is_daily) for f in fires}
    widths = [max(len(HEADER[0]), *(len(k[0]) for k in kinds)),
              max(len(HEADER[1]), *(len(k[1]) for k in kinds)),
              len("2025-01-01"),
              max(len(HEADER[3]), *(len("daily" if k[4] else f"{k[2]} {format_offset(k[3])}")
                                    for k in kinds)),
              len("Mon 2025-01-01 00:00:00")]

    def line(cells) -> str:
        return "  ".join([*(c.ljust(w) for c, w in zip(cells, widths, strict=False)),
                          cells[-1]]).rstrip() + "\n"

    events: dict[tuple, str] = {}
    chunk = [line(HEADER)]
    for f in fires:
        local = f.local()
        key = (f.event, f.offset)
        event = events.get(key) or events.setdefault(key, _event(f))
        chunk.append(line((f.job, f.calendar, f.session.isoformat(), event,
                           f.fire_utc.strftime("%a %Y-%m-%d %H:%M:%S"),
                           f"{local:%a %H:%M:%S} {local.tzname()}")))
        if len(chunk) >= CHUNK:
            out.write("".join(chunk))
            chunk.clear()
    out.write("".join(chunk))


def entry(f: Fire, requires: list[str] | None = None) -> str:
    """One element of the array as json.dumps(indent=2) writes it inside a list; `requires`:
    the jobs that must succeed first (a "requires" member)."""
    if not f.is_periodic and not f.is_daily and not f.why and not requires:
        return _fire_entry(f)
    doc = f.to_json()
    if requires:
        doc["requires"] = requires
    if all(type(v) is str for v in doc.values()):
        body = ",\n".join([(_keys.get(k) or _key(k)) + _string(v) for k, v in doc.items()])
        return "  {\n" + body + "\n  }"
    return "  " + json.dumps(doc, indent=2).replace("\n", "\n  ")


# entry() of a plain fire (one instant: neither daily nor periodic), the bulk of a large plan:
# its job, calendar, event and offset members are the same for each session of its kind, so their
# text is made once per kind, from to_json() itself; the other members are formatted as to_json()
# formats them. Measured (356,068 fires, every calendar over 10 years): 10.2 µs a fire through
# to_json() and its dict; about 6 µs here, with Fire.fire_iso and unitname.fire made cheaper too.
# tests/schedule/test_plan_scale.py holds it to json.dumps(to_json()).
_kinds: dict[tuple, tuple[str, str]] = {}
_FIRE_LOCAL, _TIMEZONE, _UNIT = (f",\n{_key(k)}" for k in ("fire_local", "timezone", "unit"))


def _fire_entry(f: Fire) -> str:
    kind = (f.job, f.calendar, f.event, f.offset)
    text = _kinds.get(kind)
    if text is None:
        doc = f.to_json()
        text = _kinds[kind] = (
            f"  {{\n{_key('job')}{_string(doc['job'])},\n"
            f"{_key('calendar')}{_string(doc['calendar'])},\n{_key('session')}",
            f",\n{_key('event')}{_string(doc['event'])},\n"
            f"{_key('offset')}{_string(doc['offset'])},\n{_key('fire_utc')}")
    local = f.local()
    return "".join((text[0], _string(f.session.isoformat()), text[1], _string(f.fire_iso),
                    _FIRE_LOCAL, _string(local.isoformat()), _TIMEZONE, _string(local.tzname()),
                    _UNIT, _string(f.unit_name.timer()), "\n  }"))


def write_json(out: TextIO, fires: Iterable[Fire], requires: dict | None = None) -> None:
    """Byte for byte what `print(json.dumps([f.to_json() for f in fires], indent=2))` printed;
    `requires` (job: its `requires` list) adds a "requires" member to that job's entries."""
    chunk: list[str] = []
    first = True
    requires = {job: list(names) for job, names in (requires or {}).items() if names}
    for f in fires:
        upstream = requires.get(f.job)
        for text in (_slot_entries(f, upstream) if f.is_periodic else (entry(f, upstream),)):
            chunk.append(("[\n" if first else ",\n") + text)
            first = False
        if len(chunk) >= CHUNK:
            out.write("".join(chunk))
            chunk.clear()
    chunk.append("[]\n" if first else "\n]\n")
    out.write("".join(chunk))


# Periodic jobs (`every`): one row / entry per slot -----------------------

def _rows(fires):
    """(fire, instant) per row: a periodic fire gives one row per slot."""
    for f in fires:
        for instant in (f.slots if f.is_periodic else (f.fire_utc,)):
            yield f, instant


def _what(f: Fire) -> str:
    return f"every {format_offset(f.every)[1:]}" if f.is_periodic else _event(f)


def _align(rows: list[tuple]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _slot_table(fires) -> str:
    """The table row by row (a periodic job: one row per slot), with a WHY column when a job's
    session rule chose some of the sessions (selection.py)."""
    why = any(f.why for f in fires)
    rows = [(*HEADER, "WHY") if why else HEADER]
    for f, instant in _rows(fires):
        local = instant.astimezone(f.local().tzinfo)
        rows.append((f.job, f.calendar, f.session.isoformat(), _what(f),
                     instant.strftime("%a %Y-%m-%d %H:%M:%S"),
                     f"{local:%a %H:%M:%S} {local.tzname()}", *((f.why,) if why else ())))
    return _align(rows)


def _span_utc(f: Fire) -> str:
    """`Thu 2026-12-24 14:35:00-17:50:00` (the last's date too when it is another day)."""
    first, last = f.fire_utc, f.last_utc
    if last == first:
        return f"{first:%a %Y-%m-%d %H:%M:%S}"
    end = f"{last:%H:%M:%S}" if last.date() == first.date() else f"{last:%a %Y-%m-%d %H:%M:%S}"
    return f"{first:%a %Y-%m-%d %H:%M:%S}-{end}"


def _span_local(f: Fire) -> str:
    """`Thu 09:35:00-12:50:00 EST` in the exchange's zone (both zones if DST changes between)."""
    zone = f.local().tzinfo
    first, last = f.fire_utc.astimezone(zone), f.last_utc.astimezone(zone)
    if last == first:
        return f"{first:%a %H:%M:%S} {first.tzname()}"
    start = f"{first:%a %H:%M:%S}" + (f" {first.tzname()}" if first.tzname() != last.tzname()
                                      else "")
    end = f"{last:%H:%M:%S}" if last.date() == first.date() else f"{last:%a %H:%M:%S}"
    return f"{start}-{end} {last.tzname()}"


def _session_table(fires) -> str:
    """A row per fire: a periodic one shows its first to last slot and their count; a WHY
    column when a job's session rule chose some of the sessions (selection.py)."""
    why = any(f.why for f in fires)
    rows = [(*HEADER, "WHY") if why else HEADER]
    for f in fires:
        what = f"{_what(f)}, {len(f.slots)} slots" if f.is_periodic else _what(f)
        rows.append((f.job, f.calendar, f.session.isoformat(), what, _span_utc(f),
                     _span_local(f), *((f.why,) if why else ())))
    return _align(rows)


def _slot_entries(f: Fire, upstream: list[str] | None = None):
    """`plan --json` for a periodic fire: one entry per slot, `slot` its UTC instant."""
    base = {**f.to_json(), **({"requires": upstream} if upstream else {})}
    zone = f.local().tzinfo
    for instant in f.slots:
        doc = {**base, "slot": iso(instant), "fire_utc": iso(instant),
               "fire_local": instant.astimezone(zone).isoformat()}
        yield "  " + json.dumps(doc, indent=2).replace("\n", "\n  ")
