"""plan.json as sync keeps it (the format: contracts/planfile.py): the previous file read back (one
that is not a plan is kept aside, not silently replaced) and the merged plan written after the
units, so that the dead-man and status still know every fire planned while it was ahead.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from market_timers.config.loader import Config
from market_timers.contracts import planfile
from market_timers.schedule import plan as planning
from market_timers.schedule.installed import last_elapse


def previous_plan(config: Config, now: datetime, dry_run: bool
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


def write_plan(config: Config, fires: list[planning.Fire], now: datetime,
                previous: planfile.PlanDoc | None, kept: set[str] = frozenset(),
                ran: set[tuple[str, str]] = frozenset(), units_changed: bool = True) -> None:
    """<state_dir>/plan.json (planfile.py): every fire planned while it was still ahead, for
    deadman/status; not rewritten when no unit changed and neither did its fires.

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
    if not units_changed and previous is not None and len(previous.entries) == len(merged) \
            and all(merged.get(e.key) is not None and merged[e.key].json == e.json
                    for e in previous.entries):
        return  # the file sync read lists these very fires: a sync with nothing to do writes none
    planfile.write(config.state_dir, now, merged.values())
