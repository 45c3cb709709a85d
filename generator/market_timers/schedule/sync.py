"""`market-timers sync`: make the live unit directory match the plan, safely on systemd 252.

Rules (from systemd 252's bugs, see the design notes in README):
* never restart, or stop+start, an existing timer: an elapsed one fires again (#31231);
* never change an existing timer's OnCalendar in place: a reload can fire it (#16732); a changed
  instant is a new unit name, so the old one is removed and the new one started;
* never write a timer whose instant is past (it would never fire, even with Persistent=true);
* no daemon-reload when only new files were added (they start without one); at most one per sync;
* timers of sessions no longer planned are stopped (a stop does not fire) and deleted;
* elapsed units are deleted after the retention period, with their Persistent= stamps;
* a (job, session) that has already started (the run ledger holds its claim) never gets a timer:
  a fire of it that moved (a changed offset, a late_open override added during the day) is not
  installed, and a timer of it still waiting (the operator ran it early with `market-timers run`)
  is stopped and deleted. The report names each, with when and where the session ran. (The runner
  would refuse such a start with 173 anyway; this keeps it from being scheduled at all.)
Running sync twice changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from market_timers import ledger
from market_timers.config.loader import Config
from market_timers.contracts import planfile, unitname
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile, safefs
from market_timers.host.clock import utcnow
from market_timers.host.systemctl import Systemctl
from market_timers.ledger import runrecord
from market_timers.schedule import credunits
from market_timers.schedule import plan as planning
from market_timers.schedule.render import (
    Installed,
    is_generated,
    last_elapse,
    read_installed,
    render_all,
    write_atomic,
)
from market_timers.schedule.syncreport import Change, Dropped, SyncResult

STAMP_DIR = Path("/var/lib/systemd/timers")
MIN_LEAD = timedelta(seconds=2)  # a fire closer than this is left to the deadman, not written

HALT_WATCH = "market-halt-watch.service"


def _existing(unit_dir: Path) -> dict[str, str]:
    out = {}
    if not unit_dir.is_dir():
        return out
    for path in sorted(unit_dir.glob(unitname.GLOB)):
        if path.suffix in (".timer", ".service") and path.is_file() and is_generated(path):
            out[path.name] = path.read_text()
    return out


def sync(config: Config, *, now: datetime | None = None, dry_run: bool = False,
         systemctl: Systemctl | None = None, stamp_dir: Path = STAMP_DIR) -> SyncResult:
    now = now or utcnow()
    systemctl = systemctl or Systemctl()
    unit_dir = config.unit_dir
    planned = planning.plan_ahead_partial(config, now)
    fires, kept = planned.fires, planned.failed_jobs()
    # A fire due within MIN_LEAD is not written anew (it could pass before systemd starts its
    # timer, and then it would never fire), but an installed timer for it is kept as it is.
    # (The timer fires a job's lead before its instant: that is the time that must be ahead.)
    # A periodic job's timer (many slots, no lead) is written even mid-session: on its first
    # start systemd drops the slots already past and fires at the next one.
    leads = {j.name: timedelta(seconds=j.fire_lead) for j in config.jobs}
    too_close = {f.unit_stem for f in fires
                 if (f.last_utc if f.is_periodic else f.fire_utc - leads.get(f.job, timedelta(0)))
                 <= now + MIN_LEAD}
    with _sync_lock(config.state_dir, dry_run):
        existing = _existing(unit_dir)
        previous, plan_problem = _previous_plan(config, now, dry_run)
        installed = _installed(existing, previous)
        ran = _already_started(config, fires)
        ran_stems = {f.unit_stem: key for f in fires
                     if (key := (f.job, f.session.isoformat())) in ran}
        desired = {u.name: u.text for u in render_all(config, fires)
                   if (unitname.stem_of(u.name) not in too_close or u.name in existing)
                   and unitname.stem_of(u.name) not in ran_stems}
        result = SyncResult(fires=fires, foreign=_foreign(unit_dir, desired, existing),
                            failures=planned.failures, plan_problem=plan_problem)
        for stem in {unitname.stem_of(n) for n in result.foreign}:  # both units of that fire
            desired.pop(f"{stem}.timer", None)
            desired.pop(f"{stem}.service", None)
        for stem, (job, session) in sorted(ran_stems.items()):  # fires are all ahead of now
            timer = f"{stem}.timer"
            result.dropped.append(Dropped(timer, job, session, ran[(job, session)],
                                          withdrawn=timer in existing))
        timers_now = {n for n in existing if n.endswith(".timer")}
        state = systemctl.show(sorted(timers_now | {n for n in desired if n.endswith(".timer")}),
                               ["ActiveState", "LoadState"])
        for name, text in desired.items():
            if name not in existing:
                result.written.append(name)
            elif existing[name] != text:
                result.rewritten.append(name)
            if name.endswith(".timer") and state.get(name, {}).get("ActiveState") != "active":
                result.started.append(name)
        retention = timedelta(days=config.retention_days)
        for name in sorted(timers_now - set(desired)):
            if unitname.split(name)[0] in kept:
                continue
            instant = installed[name].last_elapse
            if instant is None or instant > now:
                result.removed.append(name)
            elif instant + retention < now:
                result.expired.append(name)
        withdrawn = {d.unit for d in result.dropped if d.withdrawn}
        result.changes = _changes([n for n in result.removed if n not in withdrawn], installed,
                                  fires)
        result.changes += _moved(installed, fires, set(result.written), result.dropped, now,
                                 {(c.job, c.session) for c in result.changes})
        result.reloaded = bool(result.rewritten)
        if credunits.sync_dropins(config, dry_run=dry_run) and not result.reloaded:  # credentials
            result.reloaded = True
            if not dry_run:  # now, before new timers exist: a reload would load them as wanted
                systemctl.daemon_reload()  # by timers.target, which keeps a removed one listed
        if dry_run:
            return result
        try:
            unit_dir.mkdir(parents=True, exist_ok=True)
            # Atomic per file, made durable as one batch (syncfs + the directory's fsync) before
            # systemd hears of any of them: one flush, not an fsync and a directory fsync each.
            for name in result.written + result.rewritten:
                write_atomic(unit_dir / name, desired[name], sync=atomicfile.BATCH)
            for name in desired:
                if name.endswith(".timer"):
                    _enable(unit_dir, name)  # also after `apt remove` disabled them
            if result.written or result.rewritten:
                atomicfile.sync_directory(unit_dir)
        except OSError as e:
            raise SyncError(f"cannot write units into {unit_dir}: {e.strerror or e}") from None
        if result.rewritten:
            systemctl.daemon_reload()
        gone = result.removed + result.expired
        systemctl.stop(gone)
        for name in gone:
            _delete(unit_dir, name, stamp_dir)
        systemctl.reset_failed([unitname.service_of(n) for n in result.expired])
        systemctl.start(result.started)
        if getattr(config, "cluster", None) is not None:
            # the kill switch's listener (controls/haltwatch.py): once [cluster] is configured,
            # this node stops the runs a halt made anywhere covers (started unless running; its
            # condition: the DSN credential in /etc/credstore)
            systemctl.start([HALT_WATCH])
        _write_plan(config, fires, now, previous, kept, set(ran))
        return result


def _already_started(config: Config, fires: list[planning.Fire]) -> dict[tuple[str, str], dict]:
    """(job, session) -> the ledger's attempt 1, for the session fires that have started.

    In cluster mode an unreachable ledger is not an error here: sync then reads this node's local
    ledger only (runs that fell back to it) and may install a timer for a (job, session) that ran
    on another node. That is safe: the runner claims every start in the cluster ledger before it
    execs the job (a second start exits 173). It is even the usual case: market-refresh.service
    runs sync with PrivateNetwork=yes and no DSN credential, so only an operator's `sync` (root,
    /etc/credstore) withdraws timers of sessions another node already ran."""
    from market_timers.ledger import DatabaseError

    try:
        book = ledger.for_config(config)
    except DatabaseError as e:
        book = _local_after(config, e)
    out = {}
    for f in fires:
        if f.is_daily:
            continue
        key = ledger.Key(f.job, f.session.isoformat())
        try:
            try:
                holder = book.holder(key)
            except DatabaseError as e:
                book = _local_after(config, e)
                holder = book.holder(key)
        except OSError as e:  # e.g. a symlink planted in the ledger: the runner decides then
            print(f"market-timers sync: warning: cannot read the run ledger of {f.job} "
                  f"{f.session}: {e}", file=sys.stderr)
            holder = None
        if holder is None:  # a run recorded before the ledger existed (the day of the upgrade)
            old = runrecord.read(config.state_dir, f.job, f.session.isoformat()) or {}
            if old.get("started_utc") and not old.get("refused"):
                holder = {**old, "host": old.get("host", "this host"), "attempt": 1,
                          "how": "timer"}
        if holder is not None:
            out[(f.job, f.session.isoformat())] = holder
    return out


def _local_after(config: Config, error: Exception):
    from market_timers.ledger.local import LocalLedger

    if getattr(config, "cluster", None) is not None:
        print(f"market-timers sync: note: the cluster run ledger cannot be reached ({error}); "
              "timers are kept for sessions another node may have run (its claim refuses a "
              "second start)", file=sys.stderr)
    return LocalLedger(os.fspath(config.state_dir))


def _moved(installed: dict[str, Installed], fires: list[planning.Fire], written: set[str],
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


class SyncError(Exception):
    """The unit directory cannot be written (read-only, permissions): a message, not a trace."""


def _foreign(unit_dir: Path, desired: dict[str, str], existing: dict[str, str]) -> list[str]:
    """Planned unit names already taken by files market-timers did not write: never overwrite."""
    return sorted(n for n in desired if n not in existing
                  and ((unit_dir / n).exists() or (unit_dir / n).is_symlink()))


def _changes(removed: list[str], installed: dict[str, Installed], fires: list[planning.Fire]
             ) -> list[Change]:
    # a timer's scheduled instant as Installed has it: a periodic job's is its last slot
    new = {(f.job, f.session.isoformat()): iso(f.last_utc) for f in fires}
    out = []
    for name in removed:
        job, instance = unitname.split(name)
        session = instance[:10]  # the session's date ("daily" for a daily job)
        old = installed[name]
        out.append(Change(job, session, old.scheduled, new.get((job, session)), old.calendar))
    return out


def _previous_plan(config: Config, now: datetime, dry_run: bool
                   ) -> tuple[planfile.PlanDoc | None, str | None]:
    """plan.json as the last sync wrote it, or None when missing or unreadable (it is then
    written anew from this plan), and a warning when it was unreadable: its past fires are lost
    to the deadman. A file that is not a plan is kept aside as plan.json.corrupt-<UTC time>,
    for a post-mortem, not silently replaced."""
    try:
        return planfile.read(config.state_dir), None
    except planfile.PlanFileError as e:
        why = e.problem  # its hint (sync rewrites it) is what this very sync does
        file = planfile.path(config.state_dir)
        aside = file.with_name(f"{file.name}.corrupt-{now:%Y%m%dT%H%M%SZ}")
        if dry_run:
            kept = f"would keep it as {aside.name}"
        else:
            try:  # rename(2) moves a name: a symlink planted at either name is never followed
                os.rename(file, aside)
                kept = f"kept as {aside.name}"
            except OSError as err:
                kept = f"cannot keep it aside ({err.strerror})"
    except OSError as e:  # e.g. a planted symlink: never followed
        why, kept = f"cannot read {planfile.path(config.state_dir)} ({e.strerror})", "left as is"
    return None, (f"{why}; {kept}. It is written anew from this plan: the dead-man check no "
                  "longer knows the fires it listed that have passed")


def _installed(existing: dict[str, str], previous: planfile.PlanDoc | None
               ) -> dict[str, Installed]:
    """Each installed job timer: when it last elapses, the instant it was for, its calendar.

    From the plan.json entry that names it (what sync planned when it wrote the timer). A timer
    no entry names is read back from its unit files (render.read_installed): one installed before
    plan.json recorded `timer_last_utc` (an older version), an elapsed timer whose (job, session)
    has moved to a new unit since (the entry names the new one), a timer of a job removed from
    the config (its entries go), or every timer when plan.json was lost."""
    known = previous.by_unit() if previous is not None else {}
    out = {}
    for name, text in existing.items():
        if not name.endswith(".timer"):
            continue
        entry = known.get(name)
        parsed = unitname.parse(name)
        if parsed is not None and parsed.kind == unitname.DAILY:
            out[name] = Installed(None, "?", "")  # a repeating OnCalendar=: no instant
        elif entry is not None and entry.timer_last is not None:
            scheduled = iso(entry.last) if entry.every else entry.fire_utc
            out[name] = Installed(entry.timer_last, scheduled, entry.calendar)
        else:
            out[name] = read_installed(text, existing.get(unitname.service_of(name), ""))
    return out


def _enable(unit_dir: Path, timer: str) -> None:
    wants = unit_dir / "timers.target.wants"
    wants.mkdir(exist_ok=True)
    link = wants / timer
    if not link.is_symlink():
        link.symlink_to(Path("..") / timer)


def _delete(unit_dir: Path, timer: str, stamp_dir: Path) -> None:
    service = unitname.service_of(timer)
    for path in (unit_dir / "timers.target.wants" / timer, unit_dir / timer, unit_dir / service,
                 stamp_dir / f"stamp-{timer}"):
        path.unlink(missing_ok=True)


def _write_plan(config: Config, fires: list[planning.Fire], now: datetime,
                previous: planfile.PlanDoc | None, kept: set[str] = frozenset(),
                ran: set[tuple[str, str]] = frozenset()) -> None:
    """<state_dir>/plan.json (planfile.py): every fire planned while it was still ahead, for
    deadman/status.

    A (job, session) that already ran keeps the entry of the instant it ran at."""
    jobs = {j.name: j for j in config.jobs}
    current = {(f.job, f.session.isoformat()): f for f in fires}
    keep_after = now - timedelta(days=config.retention_days)
    merged: dict[tuple[str, str], planfile.PlanEntry] = {}
    for entry in previous.entries if previous is not None else ():
        # An entry still ahead but not in the plan any more was cancelled (closure, skip...).
        if entry.instant > now and entry.key not in current and entry.job not in kept:
            continue
        if entry.instant >= keep_after and entry.job in jobs:
            merged[entry.key] = entry
    for key, f in current.items():
        if key in ran and key in merged:
            continue
        job = jobs[f.job]
        merged[key] = planfile.PlanEntry.of_fire(f, grace=job.grace, timeout=job.timeout,
                                                 severity=job.severity,
                                                 timer_last=last_elapse(job, f))
    planfile.write(config.state_dir, now, merged.values())


def _sync_lock(state_dir: Path, dry_run: bool):
    """One sync at a time (the refresh timer and an operator may collide)."""
    if dry_run:
        return contextlib.nullcontext()
    # state_dir is writable by every job: never follow a planted sync.lock symlink (root
    # would create or truncate its target).
    return atomicfile.flock(safefs.open_file(state_dir / "sync.lock", os.O_RDWR | os.O_CREAT,
                                             0o644, base=state_dir, create_dirs=True))
