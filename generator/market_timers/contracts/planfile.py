"""`<state_dir>/plan.json`: every fire sync planned while it was still ahead. Written and read here only.

sync writes it (after the units) when it changed a unit or the fires (`generated_utc`: then;
the deadman's next pass reads every upcoming timer again); the deadman, status, metrics, the
event processor and the digest read it. Each entry is one (job, session): the fire's instant
(`fire_utc`), its calendar, its timer's name (`unit`), what the deadman needs (`grace_sec`,
`timeout_sec`, `severity`) and a periodic job's schedule (`every_sec`, `first_utc`, `last_utc`,
`pause_utc`, slotclock.py), and `timer_last_utc`: when that timer last elapses as rendered (the
job's lead before the instant; a periodic job's last slot; absent for a daily job and in files
written before it existed). sync reads the previous file back for the instant and calendar of
the timers it wrote, rather than parsing them out of the unit files.

The on-disk form is kept as read (`PlanEntry.json`): an entry written by another version keeps
the keys this one does not know, and every file written before the typed entry still reads.

Import-light (stdlib, instants.py and safefs.py only, no pandas): the event processor and the
metrics read it on every pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from market_timers.contracts.instants import iso, parse_iso
from market_timers.files import atomicfile, safefs

FILE = "plan.json"


class PlanFileError(ValueError):
    """plan.json exists but cannot be read as a plan: the message names the file and why (and
    what to do, `hint`); `problem` is the file and why alone."""

    def __init__(self, source: Path | str, reason: str, hint: str = "") -> None:
        self.problem = f"{source}: {reason}"
        super().__init__(f"{self.problem}; {hint}" if hint else self.problem)


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """One planned (job, session)."""

    job: str
    session: str  # the session's label, ISO date
    instant: datetime  # fire_utc, aware UTC (a periodic job: its first slot)
    unit: str  # the timer's name
    calendar: str
    grace: int  # seconds
    timeout: int  # seconds
    severity: str | None
    every: int  # a periodic job's period in seconds; 0 for a one-shot job
    first: datetime  # a periodic job's first slot; else the instant
    last: datetime  # a periodic job's last slot; else the instant
    pause: tuple[datetime, datetime] | None  # a periodic job's paused break
    timer_last: datetime | None  # when its timer last elapses; None: daily, or not recorded
    json: dict = field(compare=False, repr=False)  # the entry as on disk

    @classmethod
    def from_json(cls, d: dict) -> PlanEntry:
        """KeyError, TypeError or ValueError for an entry without a job, session or instant."""
        instant = _instant(d["fire_utc"])
        pause = d.get("pause_utc")
        return cls(job=_text(d["job"]), session=_text(d["session"]), instant=instant,
                   unit=str(d.get("unit", "")), calendar=str(d.get("calendar", "")),
                   grace=int(d.get("grace_sec", 0)), timeout=int(d.get("timeout_sec", 0)),
                   severity=d.get("severity"), every=int(d.get("every_sec") or 0),
                   first=_instant(d["first_utc"]) if d.get("first_utc") else instant,
                   last=_instant(d["last_utc"]) if d.get("last_utc") else instant,
                   pause=(_instant(pause[0]), _instant(pause[1])) if pause else None,
                   timer_last=_instant(d["timer_last_utc"]) if d.get("timer_last_utc")
                   else None, json=d)

    @classmethod
    def of_fire(cls, fire, *, grace: int, timeout: int, severity: str,
                timer_last: datetime | None) -> PlanEntry:
        """A plan.Fire's entry; timer_last: its timer's last elapse as rendered."""
        d = {**fire.to_json(), "grace_sec": grace, "timeout_sec": timeout, "severity": severity}
        if timer_last is not None:
            d["timer_last_utc"] = iso(timer_last)
        return cls.from_json(d)

    @property
    def key(self) -> tuple[str, str]:
        return (self.job, self.session)

    @property
    def fire_utc(self) -> str:
        """The instant as written (what the deadman and status print)."""
        return self.json["fire_utc"]


@dataclass(frozen=True)
class PlanDoc:
    generated_utc: str | None  # when sync last wrote it (ISO), None in a file without it
    entries: tuple[PlanEntry, ...]

    def to_json(self) -> dict:
        """The document as the readers of plan.json's dicts know it."""
        doc = {} if self.generated_utc is None else {"generated_utc": self.generated_utc}
        return {**doc, "fires": [e.json for e in self.entries]}

    def by_unit(self) -> dict[str, PlanEntry]:
        """timer name -> its entry (a daily job's one timer: its latest day's)."""
        return {e.unit: e for e in self.entries if e.unit}


def path(state_dir: Path | str) -> Path:
    return Path(state_dir) / FILE


def read(state_dir: Path | str) -> PlanDoc | None:
    """The plan sync last wrote, or None when sync has never run. PlanFileError (naming the file)
    when it is not a plan (bad JSON, an entry without job, session or instant); OSError when it
    cannot be read (a planted symlink is refused, never followed)."""
    file = path(state_dir)
    doc = _decoded(state_dir, file)
    return None if doc is None else parse(doc, file)


def _decoded(state_dir: Path | str, file: Path):
    """plan.json's JSON as decoded, or None when sync has never run (errors as `read`)."""
    try:
        data = safefs.read_bytes(file, base=state_dir)
    except FileNotFoundError:
        return None
    try:
        return json.loads(data)
    except ValueError as e:
        raise PlanFileError(file, f"not JSON ({e})", "`market-timers sync` rewrites it") from None


def read_json(state_dir: Path | str) -> dict | None:
    """plan.json as decoded, for the readers of its dicts (the dead-man every minute): each fire
    checked for a job, a session and an instant as text only, no datetime built (`read` builds
    every typed entry: 6 times the JSON's cost). None and errors as `read`."""
    file = path(state_dir)
    doc = _decoded(state_dir, file)
    if doc is None:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("fires", []), list):
        raise PlanFileError(file, "not a plan (an object with a list of fires)")
    for i, d in enumerate(doc.get("fires", [])):
        try:
            _text(d["job"]), _text(d["session"])
            fire = _text(d["fire_utc"])
            if len(fire) != 20 or fire[10] != "T" or fire[-1] != "Z":
                raise ValueError(f"{fire!r} is not YYYY-MM-DDTHH:MM:SSZ")
        except (KeyError, TypeError, ValueError) as e:
            raise PlanFileError(file, f"fires[{i}]: not a planned fire "
                                f"({type(e).__name__}: {e})") from None
    doc.setdefault("fires", [])
    return doc


def parse(doc: object, source: Path | str = FILE) -> PlanDoc:
    """A decoded plan.json document as a PlanDoc (PlanFileError naming `source`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("fires", []), list):
        raise PlanFileError(source, "not a plan (an object with a list of fires)")
    entries = []
    for i, d in enumerate(doc.get("fires", [])):
        try:
            entries.append(PlanEntry.from_json(d))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PlanFileError(source, f"fires[{i}]: not a planned fire "
                                f"({type(e).__name__}: {e})") from None
    generated = doc.get("generated_utc")
    return PlanDoc(None if generated is None else str(generated), tuple(entries))


def write(state_dir: Path | str, generated: datetime, entries: Iterable[PlanEntry]) -> None:
    """Replace plan.json atomically (safefs: a planted symlink is replaced, not followed),
    entries in (instant, job) order."""
    ordered = sorted(entries, key=lambda e: (e.fire_utc, e.job))
    # One fire a line, each by json's C encoder: indent= takes the pure-Python one, 0.4 s of
    # every sync at 10,000 fires.
    fires = ",\n".join(json.dumps(e.json, sort_keys=True) for e in ordered)
    text = (f'{{"generated_utc": {json.dumps(iso(generated))},\n"fires": [\n{fires}'
            f'{chr(10) if fires else ""}]}}\n')
    safefs.write_atomic(path(state_dir), text, base=state_dir, mode=0o644,
                        sync=atomicfile.DURABLE)


def _instant(text: str) -> datetime:
    """instants.py's form (YYYY-MM-DDTHH:MM:SSZ) -> aware UTC, by fromisoformat (C code): strptime
    made reading a plan ten times the cost of its JSON."""
    if len(text) != 20 or text[10] != "T" or text[-1] != "Z":
        raise ValueError(f"{text!r} is not YYYY-MM-DDTHH:MM:SSZ")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def deadline(entry: dict, slack_sec: int) -> datetime:
    """When a planned run with no record becomes "missed": instant + grace + timeout + slack."""
    return parse_iso(entry["fire_utc"]) + timedelta(
        seconds=int(entry.get("grace_sec", 0)) + int(entry.get("timeout_sec", 0)) + slack_sec)
