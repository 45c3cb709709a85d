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
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.config.loader import Config
from market_timers.contracts import planfile, unitname
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile, safefs
from market_timers.host.clock import utcnow
from market_timers.host.systemctl import Systemctl, SystemctlError
from market_timers.schedule import credunits, jobusers, unitcache
from market_timers.schedule import plan as planning
from market_timers.schedule.installed import UnitTexts, find_generated
from market_timers.schedule.planmerge import previous_plan, write_plan
from market_timers.schedule.render import (
    Installed,
    default_runner,
    iter_units,
    read_installed,
    write_atomic,
)
from market_timers.schedule.started import already_started
from market_timers.schedule.syncreport import Dropped, SyncResult, changes, moved

STAMP_DIR = Path("/var/lib/systemd/timers")
MIN_LEAD = timedelta(seconds=2)  # a fire closer than this is left to the deadman, not written

HALT_WATCH = "market-halt-watch.service"


def sync(config: Config, *, now: datetime | None = None, dry_run: bool = False,
         systemctl: Systemctl | None = None, stamp_dir: Path = STAMP_DIR,
         progress=None) -> SyncResult:
    """`progress`: told after each chunk of a long start or stop (cli/progress.py)."""
    now = now or utcnow()
    systemctl = systemctl or Systemctl()
    if progress is not None:
        systemctl.on_chunk = progress
    planned = planning.plan_ahead_partial(config, now)
    fires, kept = planned.fires, planned.failed_jobs()
    with _sync_lock(config.state_dir, dry_run):
        cache = unitcache.load(unitcache.path_for(config.unit_dir),
                               unitcache.inputs_digest(config, config.runner or default_runner()))
        existing, stats = find_generated(config.unit_dir, cache.known)
        previous, plan_problem = previous_plan(config, now, dry_run)
        installed = _installed(existing, previous)
        ran = already_started(config, fires)
        same, digests = unitcache.as_written(cache, fires, stats)
        desired, ran_stems = _desired(config, fires, now, existing, ran, same)
        result = SyncResult(fires=fires, foreign=_foreign(config.unit_dir, desired, existing),
                            failures=planned.failures, plan_problem=plan_problem)
        _set_aside(result, desired, existing, ran, ran_stems)
        _compare(result, desired, existing, systemctl)
        _retire(result, desired, existing, installed, kept, now, config.retention_days)
        withdrawn = {d.unit for d in result.dropped if d.withdrawn}
        result.changes = changes([n for n in result.removed if n not in withdrawn], installed,
                                 fires)
        result.changes += moved(installed, fires, set(result.written), result.dropped, now,
                                {(c.job, c.session) for c in result.changes})
        result.reloaded = bool(result.rewritten)
        result.users_missing = jobusers.sync_users(config, dry_run=dry_run)  # before their units
        if credunits.sync_dropins(config, dry_run=dry_run) and not result.reloaded:  # credentials
            result.reloaded = True
            if not dry_run:  # now, before new timers exist: a reload would load them as wanted
                systemctl.daemon_reload()  # by timers.target, which keeps a removed one listed
        if dry_run:
            return result
        not_started = _apply(config.unit_dir, result, desired, systemctl, stamp_dir)
        unitcache.save(cache, config.unit_dir, {n: digests.get(n, "") for n in desired},
                       {n: st for n, st in stats.items() if n not in result.rewritten})
        if getattr(config, "cluster", None) is not None:
            # the kill switch's listener (controls/haltwatch.py): once [cluster] is configured,
            # this node stops the runs a halt made anywhere covers (started unless running; its
            # condition: the DSN credential in /etc/credstore)
            systemctl.start([HALT_WATCH])
        write_plan(config, fires, now, previous, kept, set(ran),
                   units_changed=result.changed_anything or result.reloaded)
        if not_started is not None:  # after plan.json: the dead-man knows every fire planned
            raise SystemctlError(f"{not_started}; the other units are installed and started, and "
                                 "market-timers sync again starts them", not_started.failed)
        return result


def _desired(config: Config, fires: list[planning.Fire], now: datetime, existing: UnitTexts,
             ran: dict, same: set[str]) -> tuple[dict[str, str | None], dict[str, tuple[str, str]]]:
    """(unit name -> text of every unit the plan wants, None for one installed as sync would
    write it (the stems in `same`), timer stem -> (job, session) of the fires whose session
    already started)."""
    # A fire due within MIN_LEAD is not written anew (it could pass before systemd starts its
    # timer, and then it would never fire), but an installed timer for it is kept as it is.
    # (The timer fires a job's lead before its instant: that is the time that must be ahead.)
    # A periodic job's timer (many slots, no lead) is written even mid-session: on its first
    # start systemd drops the slots already past and fires at the next one.
    leads = {j.name: timedelta(seconds=j.fire_lead) for j in config.jobs}
    too_close = {f.unit_stem for f in fires
                 if (f.last_utc if f.is_periodic else f.fire_utc - leads.get(f.job, timedelta(0)))
                 <= now + MIN_LEAD}
    ran_stems = {f.unit_stem: key for f in fires
                 if (key := (f.job, f.session.isoformat())) in ran}

    def wanted(name: str) -> bool:
        stem = unitname.stem_of(name)
        return (stem not in too_close or name in existing) and stem not in ran_stems

    desired: dict[str, str | None] = {
        u.name: u.text for u in iter_units(config, [f for f in fires if f.unit_stem not in same])
        if wanted(u.name)}
    desired.update((n, None) for stem in same for n in (f"{stem}.timer", f"{stem}.service")
                   if wanted(n))
    return dict(sorted(desired.items())), ran_stems


def _set_aside(result: SyncResult, desired: dict[str, str | None], existing: UnitTexts, ran: dict,
               ran_stems: dict[str, tuple[str, str]]) -> None:
    """Never overwrite a foreign file (both units of that fire stay unwritten); the timers of
    sessions that already started are dropped (withdrawn when installed)."""
    for stem in {unitname.stem_of(n) for n in result.foreign}:
        desired.pop(f"{stem}.timer", None)
        desired.pop(f"{stem}.service", None)
    for stem, (job, session) in sorted(ran_stems.items()):  # fires are all ahead of now
        timer = f"{stem}.timer"
        result.dropped.append(Dropped(timer, job, session, ran[(job, session)],
                                      withdrawn=timer in existing))


def _compare(result: SyncResult, desired: dict[str, str | None], existing: UnitTexts,
             systemctl: Systemctl) -> None:
    """The units to write, to rewrite, and the timers to start (not active now)."""
    timers_now = {n for n in existing if n.endswith(".timer")}
    state = systemctl.show(sorted(timers_now | {n for n in desired if n.endswith(".timer")}),
                           ["ActiveState", "LoadState"])
    for name, text in desired.items():
        if name not in existing:
            result.written.append(name)
        elif text is not None and existing[name] != text:
            result.rewritten.append(name)
        if name.endswith(".timer") and state.get(name, {}).get("ActiveState") != "active":
            result.started.append(name)


def _retire(result: SyncResult, desired: dict[str, str | None], existing: UnitTexts,
            installed: dict[str, Installed], kept: set[str], now: datetime,
            retention_days: int) -> None:
    """Installed timers the plan no longer wants: removed while ahead, expired once elapsed
    longer than the retention; a calendar that failed keeps its jobs' timers."""
    retention = timedelta(days=retention_days)
    for name in sorted({n for n in existing if n.endswith(".timer")} - set(desired)):
        if unitname.split(name)[0] in kept:
            continue
        instant = installed[name].last_elapse
        if instant is None or instant > now:
            result.removed.append(name)
        elif instant + retention < now:
            result.expired.append(name)


def _apply(unit_dir: Path, result: SyncResult, desired: dict[str, str | None], systemctl: Systemctl,
           stamp_dir: Path) -> SystemctlError | None:
    """Write, reload once if a unit changed, stop and delete, start; the error of timers that
    did not start (the others are started: a chunked start sends every chunk)."""
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
        # Atomic per file, made durable as one batch (syncfs + the directory's fsync) before
        # systemd hears of any of them: one flush, not an fsync and a directory fsync each.
        for name in result.written + result.rewritten:
            write_atomic(unit_dir / name, desired[name], sync=atomicfile.BATCH)
        _enable(unit_dir, [n for n in desired if n.endswith(".timer")])
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
    try:
        systemctl.start(result.started)
    except SystemctlError as e:
        return e
    return None


class SyncError(Exception):
    """The unit directory cannot be written (read-only, permissions): a message, not a trace."""


def _foreign(unit_dir: Path, desired: dict[str, str | None], existing: UnitTexts) -> list[str]:
    """Planned unit names already taken by files market-timers did not write: never overwrite."""
    return sorted(n for n in desired if n not in existing
                  and ((unit_dir / n).exists() or (unit_dir / n).is_symlink()))


def _installed(existing: UnitTexts, previous: planfile.PlanDoc | None
               ) -> dict[str, Installed]:
    """Each installed job timer: when it last elapses, the instant it was for, its calendar.

    From the plan.json entry that names it (what sync planned when it wrote the timer). A timer
    no entry names is read back from its unit files (render.read_installed): one installed before
    plan.json recorded `timer_last_utc` (an older version), an elapsed timer whose (job, session)
    has moved to a new unit since (the entry names the new one), a timer of a job removed from
    the config (its entries go), or every timer when plan.json was lost."""
    known = previous.by_unit() if previous is not None else {}
    out = {}
    for name in existing:
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
            out[name] = read_installed(existing[name],
                                       existing.get(unitname.service_of(name), ""))
    return out


def _enable(unit_dir: Path, timers: list[str]) -> None:
    """Each timer linked in timers.target.wants/ (also after `apt remove` disabled them)."""
    wants = unit_dir / "timers.target.wants"
    wants.mkdir(exist_ok=True)
    linked = {e.name for e in os.scandir(wants) if e.is_symlink()}
    for timer in timers:
        if timer not in linked:
            (wants / timer).symlink_to(Path("..") / timer)


def _delete(unit_dir: Path, timer: str, stamp_dir: Path) -> None:
    service = unitname.service_of(timer)
    for path in (unit_dir / "timers.target.wants" / timer, unit_dir / timer, unit_dir / service,
                 stamp_dir / f"stamp-{timer}"):
        path.unlink(missing_ok=True)


def _sync_lock(state_dir: Path, dry_run: bool):
    """One sync at a time (the refresh timer and an operator may collide)."""
    if dry_run:
        return contextlib.nullcontext()
    # state_dir is writable by every job: never follow a planted sync.lock symlink (root
    # would create or truncate its target).
    return atomicfile.flock(safefs.open_file(state_dir / "sync.lock", os.O_RDWR | os.O_CREAT,
                                             0o644, base=state_dir, create_dirs=True))
