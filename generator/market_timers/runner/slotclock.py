"""A periodic job's slots at run time: which slot a start belongs to, and its run record (Slot:
what a slot's start adds to the one start sequence, runner/__init__.py `_start`).

The runner imports this on the hot path: `os` and `datetime` only (no json, no typing, no pandas).
The schedule comes from the unit's Environment= (render.py): the first and last slot, the period
and the paused break, from which every slot is rebuilt exactly as plan.py computed it:

    first + k * every  (k = 0, 1, ...)  up to last, minus those strictly inside the pause.

The run ledger's key for a slot is (job, session, `YYYYMMDDTHHMMSSZ`): the runner claims it there,
so a slot runs at most once (a second start is "already ran", 173). Beside the ledger, each slot
has a record at `<state_dir>/runs/<job>/<session>/<YYYYMMDDTHHMMSSZ>.json` (the record key
`<session>/<slot>`): what the
start came to, and for a slot that never started, written afterwards by slotaccount.account(),
"skipped". The skip counts, the digest, status and the deadman read these.
"""

import os
import time
from datetime import UTC, datetime, timedelta

from market_timers import ledger
from market_timers.contracts import environment
from market_timers.files import flatjson
from market_timers.runner.start import WARNING, log, now_text, utc_text


def record_path(state_dir: str, job: str, key: str) -> str:
    """<state_dir>/runs/<job>/<session>/<slot>.json for the key `<session>/<slot>`."""
    return os.path.join(ledger.runs_dir(state_dir, job), f"{key}.json")


def parse_z(text: str) -> datetime:
    """`YYYY-MM-DDTHH:MM:SSZ` -> aware UTC (fromisoformat is C code; strptime costs imports)."""
    if len(text) != 20 or not text.endswith("Z"):
        raise ValueError(f"{text!r} is not YYYY-MM-DDTHH:MM:SSZ")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def z(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PeriodicSlots:
    __slots__ = ("first", "every", "last", "pause")

    def __init__(self, first: datetime, every: int, last: datetime,
                 pause: tuple[datetime, datetime] | None = None):
        if every <= 0 or last < first:
            raise ValueError("a schedule needs every > 0 and last >= first")
        self.first, self.every, self.last, self.pause = first, every, last, pause

    @classmethod
    def from_env(cls, env: dict) -> "PeriodicSlots | None":
        """None for a one-shot job; ValueError for a malformed periodic context."""
        if not env.get(environment.SLOT_EVERY_SEC):
            return None
        pause = None
        if env.get(environment.SLOT_PAUSE_UTC):
            a, _, b = env[environment.SLOT_PAUSE_UTC].partition("/")
            pause = (parse_z(a), parse_z(b))
        return cls(parse_z(env[environment.SLOT_FIRST_UTC]), int(env[environment.SLOT_EVERY_SEC]),
                   parse_z(env[environment.SLOT_LAST_UTC]), pause)

    @classmethod
    def from_plan(cls, entry) -> "PeriodicSlots":
        """From a periodic job's plan.json entry (a planfile.PlanEntry, or its dict)."""
        if isinstance(entry, dict):
            from market_timers.contracts.planfile import (  # not on the runner's path: it never reads the plan
                PlanEntry,
            )

            entry = PlanEntry.from_json(entry)
        if not entry.every:
            raise KeyError("every_sec")  # a one-shot job's entry has no schedule
        return cls(entry.first, entry.every, entry.last, entry.pause)

    def _paused(self, t: datetime) -> bool:
        return self.pause is not None and self.pause[0] < t < self.pause[1]

    def slots(self) -> list[datetime]:
        n = int((self.last - self.first).total_seconds()) // self.every + 1
        out = [self.first + timedelta(seconds=k * self.every) for k in range(n)]
        return [t for t in out if not self._paused(t)]

    def current(self, now: datetime) -> datetime:
        """The slot a start at `now` belongs to: the latest slot at or before now (the first one
        for a start before the window). A run is judged against it (grace)."""
        n = int((self.last - self.first).total_seconds()) // self.every + 1
        k = int((now - self.first).total_seconds() // self.every)
        slot = self.first + timedelta(seconds=max(0, min(k, n - 1)) * self.every)
        if self._paused(slot):  # inside the break: the last slot before it
            k = int((self.pause[0] - self.first).total_seconds() // self.every)
            slot = self.first + timedelta(seconds=k * self.every)
        return slot


def slot_name(slot: datetime) -> str:
    return slot.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def record_key(session: str, slot: datetime) -> str:
    """What stands for `session` in runstart/runrecord paths: `<session>/<slot>`."""
    return f"{session}/{slot_name(slot)}"


def write_new(state_dir: str, job: str, key: str, fields: dict) -> bool:
    """Create the slot's record unless it exists (atomic: link(2) of a complete temp file).

    False when the slot already has a record (a duplicate start, or a slot already judged).
    Not atomicfile: this is an exclusive create (link(2) fails on an existing name), not a
    replace, and it runs on the runner's start path, which imports nothing more."""
    path = record_path(state_dir, job, key)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, flatjson.dumps({"job": job, **fields}).encode())
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def pointer_path(state_dir: str, job: str, session: str, invocation: str) -> str:
    """Where the runner notes which slot this invocation judged, for ExecStopPost's --record."""
    return os.path.join(ledger.slot_records_dir(state_dir, job, session), f".invocation-{invocation}")


def write_pointer(state_dir: str, job: str, session: str, invocation: str | None,
                  key: str) -> None:
    if not invocation or not invocation.isalnum():
        return
    fd = os.open(pointer_path(state_dir, job, session, invocation),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, key.encode())
    finally:
        os.close(fd)


# A start's slot (the runner's; runner/__init__.py `_start` is the one start sequence) --------------

class Slot:
    def __init__(self, env: dict, job: str, now: datetime):
        self.session = env.get(environment.SESSION, "")
        if not self.session:
            raise KeyError(environment.SESSION)
        self.instant = PeriodicSlots.from_env(env).current(now)
        self.text = utc_text(self.instant)
        self.key = ledger.Key(job, self.session, slot_name(self.instant))
        self.what = f"{job} for session {self.session}, slot {self.text}"
        self.lock_label = f"{self.session} slot {self.text}"
        self.unreachable_what = f"this slot of {job}"
        self._state_dir = env.get(environment.STATE_DIR, environment.DEFAULT_STATE_DIR)
        self._invocation = env.get("INVOCATION_ID")

    def stale_message(self, late: float, grace: int) -> str:
        return (f"stale start: {self.what} is {late:.0f} s late, more than its grace of {grace} "
                "s; not running it (missed slots are not replayed)")

    def note(self, **fields) -> None:
        """The slot's record, for counting (never stops the job)."""
        try:
            key = record_key(self.session, self.instant)
            if write_new(self._state_dir, self.key.job, key, dict(
                    session=self.session, slot=self.text, scheduled_utc=self.text,
                    started_utc=now_text(), started_mono=time.monotonic(),
                    invocation=self._invocation, result=None, **fields)):
                write_pointer(self._state_dir, self.key.job, self.session, self._invocation,
                              key)
        except OSError as e:
            log(WARNING, f"cannot write the slot record in {self._state_dir}: {e}")

    def ran(self, late: float, attempt: int) -> None:
        self.note(late_sec=round(late, 3), pid=os.getpid(), attempt=attempt)
