"""A periodic job's slots accounted from their records: the skipped ones recorded, all counted.

systemd never starts a second copy of a service that is still active: a slot that comes during a
run starts nothing then. When the run ends, systemd 252 starts the service once more at once (the
missed elapses coalesced; seen in tests/e2e/test_periodic.py through the ledger's refusals); the
runner judges that start against the latest slot: later than grace it is refused (170) and
counted with the skips, within grace it runs, late. Slots that never got a start are recorded by
no runner, so `account()` infers them from the schedule and the records: every slot that can no
longer start (its instant + grace has passed) and has no record gets one, `skipped`:

* "overlap": a run was going at that instant (the record names it) - max_instances = 1;
* "not-started": nothing ran then (host down, timer stopped, coalesced after downtime).

It runs after each run (ExecStopPost=, `market-timers-run --record`), in the alert handlers and in
each dead-man pass, so every slot of a session ends up either run or recorded skipped. The counts
feed one warning per session (at the first skip), the digest, `status` and the dead-man's stall
check. Not on the runner's start path (json is fine here).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from market_timers.contracts import unitname
from market_timers.runner.slotclock import (
    PeriodicSlots,
    parse_z,
    record_key,
    slot_name,
    write_new,
    z,
)
from market_timers.runner.slotrecords import read_slots

log = logging.getLogger("market_timers.schedule.periodic")

ACCOUNT_MARGIN = timedelta(seconds=2)  # beyond grace, before a slot with no record is "skipped"
# The runner's refusals that hold a slot (market-timers pause, halt): not run, not missed, and
# not a skip: nothing is wrong with the job, someone chose to hold it (info for the digest).
HELD = ("paused", "halted")


def _instant(text) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def ran(record: dict) -> bool:
    """The slot's run started (the job was exec'd), whatever its result."""
    return bool(record.get("started_utc")) and not record.get("refused") \
        and not record.get("skipped")


def _intervals(records: dict[str, dict], now: datetime) -> list[tuple[datetime, datetime, str]]:
    out = []
    for slot, r in records.items():
        if not ran(r):
            continue
        start = _instant(r["started_utc"])
        end = _instant(r["finished_utc"]) if r.get("finished_utc") else None
        if start is None:
            continue
        if end is None and r.get("duration_sec") is not None:
            end = start + timedelta(seconds=float(r["duration_sec"]))
        out.append((start, end or now + timedelta(days=365), slot))
    return out


@dataclass
class Summary:
    total: int = 0
    ran: int = 0
    skipped: int = 0  # overlap (a run was going) + lock busy + stale start + not started
    overlap: int = 0
    refused: int = 0  # stale start or lock group busy (the runner's refusals)
    not_started: int = 0
    ahead: int = 0  # slots that may still start
    held: int = 0  # refused by a pause or a halt (HELD): neither run nor skipped
    last_held_slot: str | None = None  # the stall clock restarts after it (the resume)
    running: bool = False
    longest_sec: float | None = None
    last_run_slot: str | None = None
    first_skipped: str | None = None
    every: int = 0
    skipped_slots: list[str] = field(default_factory=list)

    def text(self, job: str) -> str:
        """`cycle: 13 of 378 slots skipped so far, the run takes 84 s against a 60 s period`."""
        so_far = " so far" if self.ahead else ""
        line = f"{job}: {self.skipped} of {self.total} slots skipped{so_far}"
        if self.longest_sec is not None and self.longest_sec > self.every:
            line += (f", the run takes {self.longest_sec:.0f} s against a {self.every} s period")
        parts = [f"{n} {what}" for n, what in ((self.overlap, "while a run was still going"),
                                               (self.refused, "refused (late or lock busy)"),
                                               (self.not_started, "not started"))
                 if n]
        if parts:
            line += f" ({', '.join(parts)})"
        if self.held:
            line += f"; {self.held} held by a pause or halt (not run, not missed)"
        return line


def account(state_dir, job: str, session: str, schedule: PeriodicSlots, grace: int,
            now: datetime, *, write: bool = True) -> Summary:
    """Record every slot that can no longer start and has no record as skipped; count them."""
    records = read_slots(state_dir, job, session)
    runs = _intervals(records, now)
    summary = Summary(every=schedule.every)
    cutoff = now - timedelta(seconds=grace) - ACCOUNT_MARGIN
    for slot in schedule.slots():
        text = z(slot)
        summary.total += 1
        record = records.get(text)
        if record is None and slot <= cutoff:
            during = [s for start, end, s in runs if start <= slot < end]
            record = {"job": job, "session": session, "slot": text, "scheduled_utc": text,
                      "skipped": "overlap" if during else "not-started",
                      "recorded_utc": z(now)}
            if during:
                record["during_run_of"] = during[0]
            if write:
                try:
                    write_new(str(state_dir), job, record_key(session, slot), record)
                except OSError as e:
                    log.warning("cannot record skipped slot %s of %s: %s", text, job, e)
            records[text] = record
        if record is None:
            summary.ahead += 1
            continue
        if ran(record):
            summary.ran += 1
            summary.last_run_slot = text
            duration = record.get("duration_sec")
            start = _instant(record.get("started_utc"))
            if duration is None and not record.get("result"):
                summary.running = True
                duration = (now - start).total_seconds() if start else None
            elif duration is None and start and record.get("finished_utc"):
                end = _instant(record["finished_utc"])
                duration = (end - start).total_seconds() if end else None
            if isinstance(duration, int | float):
                summary.longest_sec = max(summary.longest_sec or 0.0, float(duration))
            continue
        if record.get("refused") in HELD:
            summary.held += 1
            summary.last_held_slot = text
            continue
        summary.skipped += 1
        summary.skipped_slots.append(text)
        summary.first_skipped = summary.first_skipped or text
        if record.get("skipped") == "overlap":
            summary.overlap += 1
        elif record.get("skipped"):
            summary.not_started += 1
        else:
            summary.refused += 1
    return summary


def stall(entry: dict, summary: Summary, stall_after: int, now: datetime,
          slack: int) -> tuple[str, str] | None:
    """(key, text) when no slot of this session has started for stall_after, else None."""
    schedule = PeriodicSlots.from_plan(entry)
    if summary.last_run_slot:
        gap_start = parse_z(summary.last_run_slot) + timedelta(seconds=schedule.every)
    else:
        gap_start = schedule.first
    if summary.last_held_slot:  # held by a pause or halt until then: the clock restarts
        gap_start = max(gap_start, parse_z(summary.last_held_slot) +
                        timedelta(seconds=schedule.every))
    if schedule.pause and schedule.pause[0] < gap_start < schedule.pause[1]:
        gap_start = schedule.pause[1]
    # The latest slot that could have started by now (grace + slack passed), within the window;
    # stalled when the slots from gap_start to it, none started, span stall_after.
    end = min(now - timedelta(seconds=slack), schedule.last)
    if gap_start > schedule.last or (end - gap_start).total_seconds() + schedule.every \
            < stall_after:
        return None
    job, session = entry["job"], entry["session"]
    if not summary.ran:
        return (f"missed:{job}:{session}",
                f"{job} ({entry.get('calendar', '?')} {session}, every {schedule.every} s from "
                f"{entry['first_utc']}) has not run at all: no slot has started in "
                f"{stall_after} s (stall_after). Check `systemctl list-timers "
                f"'{unitname.session_glob(job, session)}'` and `journalctl MARKET_JOB={job} "
                f"MARKET_SESSION={session}`.")
    going = " (that run is still going)" if summary.running else ""
    return (f"missed:{job}:{session}:stalled-{slot_name(gap_start)}",
            f"{job} ({entry.get('calendar', '?')} {session}) stalled: no slot has started since "
            f"the run of {summary.last_run_slot}{going}, {stall_after} s or more "
            f"(stall_after). Missed slots are not replayed; the next slot runs once the cause is "
            f"gone. Check `journalctl MARKET_JOB={job} MARKET_SESSION={session}`.")


def periodic_digest_lines(state_dir, session: str, now: datetime | None = None) -> list[str]:
    """The digest's per-session count of each periodic job's slots (from plan.json)."""
    from market_timers.contracts import planfile

    try:
        plan = planfile.read(state_dir)
    except (OSError, ValueError):
        return []
    lines = []
    for entry in plan.entries if plan else ():
        if entry.session != session or not entry.every:
            continue
        try:
            s = account(state_dir, entry.job, session, PeriodicSlots.from_plan(entry), entry.grace,
                        now or datetime.now(UTC), write=False)
        except (OSError, ValueError, KeyError):
            continue
        lines.append(f"  {s.text(entry.job)}; {s.ran} ran, {s.ahead} not yet due")
    return (["", "Periodic jobs (slots):", *lines]) if lines else []
