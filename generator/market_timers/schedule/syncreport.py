"""What a sync did, or would do with --dry-run: the units written, started, stopped and deleted,
the fires that moved, the sessions withdrawn because they already ran, and its report lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from market_timers import ledger
from market_timers.contracts import unitname
from market_timers.contracts.instants import iso
from market_timers.schedule import plan as planning
from market_timers.schedule.installed import Installed


@dataclass
class Change:
    """A planned fire that moved or vanished since the last sync (a calendar or config change)."""

    job: str
    session: str
    old_utc: str
    new_utc: str | None  # None: no longer planned
    calendar: str = ""
    note: str = ""  # e.g. "it already ran: not installed"

    def describe(self, calendar: str = "") -> str:
        what = f"{calendar or self.calendar} {self.session}".strip()
        if self.new_utc is None:
            return f"{what}: {self.job} no longer planned (was {self.old_utc})"
        note = f"; {self.note}" if self.note else ""
        return f"{what}: {self.job} moved from {self.old_utc} to {self.new_utc}{note}"


@dataclass
class Dropped:
    """A timer not installed (or withdrawn) because its (job, session) already started."""

    unit: str
    job: str
    session: str
    ran: dict  # the ledger's attempt 1: host, pid, started_utc...
    withdrawn: bool = False  # it was waiting: stopped and deleted

    def describe(self, dry_run: bool = False) -> str:
        verb = "would " if dry_run else ""
        act = f"{verb}stop and delete" if self.withdrawn else f"{verb}not install"
        return (f"{act} {self.unit}: {self.job} already ran for session {self.session} "
                f"({ledger.describe(self.ran)})")


@dataclass
class SyncResult:
    started: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # future timers no longer planned
    expired: list[str] = field(default_factory=list)  # elapsed, past retention
    changes: list[Change] = field(default_factory=list)
    users_missing: list[tuple[str, str]] = field(default_factory=list)  # (job, user): no user
    dropped: list[Dropped] = field(default_factory=list)  # already ran: no timer
    reloaded: bool = False
    fires: list[planning.Fire] = field(default_factory=list)
    # calendars that could not be planned: their jobs' installed timers are left as they are
    failures: list[planning.CalendarFailure] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # planned names held by hand-made files
    plan_problem: str | None = None  # plan.json could not be read: why, and what became of it

    @property
    def changed_anything(self) -> bool:
        return bool(self.started or self.written or self.rewritten or self.removed
                    or self.expired)

    def lines(self, dry_run: bool = False) -> list[str]:
        verb = "would " if dry_run else ""
        out = [f"{verb}write {n}" for n in self.written]
        out += [f"{verb}rewrite {n}" for n in self.rewritten]
        out += [f"{verb}start {n}" for n in self.started]
        withdrawn = {d.unit for d in self.dropped if d.withdrawn}
        out += [f"{verb}stop and delete {n} (no longer planned)" for n in self.removed
                if n not in withdrawn]
        out += [d.describe(dry_run) for d in self.dropped]
        out += [f"{verb}delete {n} (elapsed, past retention)" for n in self.expired]
        out += [f"{'would ' if dry_run else ''}daemon-reload"] if self.reloaded else []
        out += [f"change: {c.describe()}" for c in self.changes]
        out += [f"warning: left {n} alone: that file was not written by market-timers (no "
                "generated header), so this fire is not installed; rename or remove the file"
                for n in self.foreign]
        out += [f"warning: {self.plan_problem}"] if self.plan_problem else []
        return out or ["nothing to do"]

    def report(self, dry_run: bool = False, verbose: bool = False) -> list[str]:
        """`sync`'s output: what needs reading (a run withdrawn, a fire moved, a warning), then
        one summary line; `verbose`: every unit's line first, as lines() has them."""
        if verbose:
            out = [x for x in self.lines(dry_run) if x != "nothing to do"]
        else:
            out = [d.describe(dry_run) for d in self.dropped]
            out += [x for x in self.lines(dry_run) if x.startswith(("change: ", "warning: "))]
        return [*out, self.summary(dry_run)]

    def summary(self, dry_run: bool = False) -> str:
        sessions = len({(f.calendar, f.session) for f in self.fires})
        what = f"{len(self.fires)} fires of {sessions} sessions"
        if not self.changed_anything:
            return f"nothing to do: the {what} are installed" if self.fires else \
                "nothing to do: no fire planned"
        counts = (f"write {len(self.written)} units ({len(self.rewritten)} rewritten), start "
                  f"{len(self.started)} timers, stop {len(self.removed)}, delete "
                  f"{len(self.expired)}")
        if dry_run:
            return f"would sync {what}: {counts} (each unit: sync --dry-run -v)"
        done = counts.replace("write", "wrote", 1).replace("start", "started", 1).replace(
            "stop", "stopped", 1).replace("delete", "deleted", 1)
        return f"synced {what}: {done} (each unit: sync -v)"


def changes(removed: list[str], installed: dict[str, Installed], fires: list[planning.Fire]
            ) -> list[Change]:
    """The fires of the removed timers: each moved (its new instant) or no longer planned."""
    # a timer's scheduled instant as Installed has it: a periodic job's is its last slot
    new = {(f.job, f.session.isoformat()): iso(f.last_utc) for f in fires}
    out = []
    for name in removed:
        job, instance = unitname.split(name)
        session = instance[:10]  # the session's date ("daily" for a daily job)
        old = installed[name]
        out.append(Change(job, session, old.scheduled, new.get((job, session)), old.calendar))
    return out


def moved(installed: dict[str, Installed], fires: list[planning.Fire], written: set[str],
          dropped: list[Dropped], now: datetime, reported: set[tuple[str, str]]
          ) -> list[Change]:
    """Fires that moved away from a timer that has already fired (which stays, elapsed): reported
    when this sync installs the new timer, or drops it because the session already ran."""
    not_installed = {d.unit: d for d in dropped if not d.withdrawn}
    out = []
    for f in fires:
        timer = f.unit_name.timer()
        key = (f.job, f.session.isoformat())
        if f.is_daily or key in reported or (timer not in written and timer not in not_installed):
            continue
        for name, old in sorted(installed.items()):
            instant = old.last_elapse
            if _same_session(name, f) and name != timer and instant is not None \
                    and instant <= now:
                note = "it already ran: not installed, not run again" \
                    if timer in not_installed else ""
                out.append(Change(f.job, key[1], old.scheduled, f.fire_iso,
                                  old.calendar or f.calendar, note))
    return out


def _same_session(name: str, fire: planning.Fire) -> bool:
    """Is `name` a unit of this fire's (job, session), at this or another instant?"""
    other = unitname.parse(name)
    return other is not None and other.kind in (unitname.FIRE, unitname.PERIODIC) \
        and (other.job, other.session) == (fire.job, fire.session.isoformat())
