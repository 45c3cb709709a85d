"""The dead-man pass for periodic jobs (`every`): a session is judged by its slots.

The slot records (this node's) are accounted: skipped slots recorded, the session's one skip
warning raised, and a finding when no slot has started for `stall_after` (or none at all in the
session). A session none of whose slots ran is a miss at any later pass, as a single job's is
(the host was off for the whole session and booted days later): past its window (plus an hour)
a session is accounted once more, and then remembered as judged in deadman.json, so that the
passes do not read hundreds of slot records of every old session each minute. Old slot records
go after retention_days (hundreds per session).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from market_timers.alerts.skipped_slots import warn_once
from market_timers.config.watch import WatchConfig
from market_timers.contracts.instants import iso
from market_timers.contracts.slotcount import SlotCount
from market_timers.runner.slotaccount import account, stall
from market_timers.runner.slotclock import PeriodicSlots
from market_timers.runner.slotrecords import prune
from market_timers.watch.findings import Finding, PassResult


def judged_key(job: str, session: str) -> str:
    """deadman.json's mark of a past session already accounted (reported.py keeps it while the
    plan has the session)."""
    return f"judged:{job}:{session}"


def check_session(config, entry: dict, now: datetime, watch: WatchConfig, state_dir: Path,
                  result: PassResult, alert, seen: dict[str, str]) -> None:
    """A periodic job's session: record the skipped slots, the session's one skip warning, and a
    finding when no slot has started for stall_after (or none at all in the session). `seen`:
    deadman.json's reported keys (the judged mark of an old session is kept there)."""
    schedule = PeriodicSlots.from_plan(entry)
    job = next((j for j in config.jobs if j.name == entry["job"]), None)
    periodic = getattr(job, "periodic", None)
    stall_after = periodic.stall_after if periodic else 5 * schedule.every
    grace = int(entry.get("grace_sec", 0))
    horizon = schedule.last + timedelta(seconds=max(stall_after, grace) + watch.slack_sec + 3600)
    judged = judged_key(entry["job"], entry["session"])
    old = now > horizon
    if now < schedule.first or (old and judged in seen):
        return
    summary = account(state_dir, entry["job"], entry["session"], schedule, grace, now)
    if old:
        seen[judged] = iso(now)

    def raise_(cfg, **kw):  # send_alert has no `details`
        kw.pop("details", None)
        return alert(cfg, **kw)

    warn_once(config, entry["job"], entry["session"], SlotCount.of(summary, entry["job"]),
              entry.get("severity"), state_dir, now=now, raise_alert=raise_)
    if not summary.ran and not summary.ahead and summary.held < summary.total \
            and now > schedule.last + timedelta(seconds=grace + watch.slack_sec):
        # the same key as the stall's "has not run at all": said once, whichever came first
        found = (f"missed:{entry['job']}:{entry['session']}",
                 f"{entry['job']} ({entry.get('calendar', '?')} {entry['session']}) ran none of "
                 f"its {summary.total} slots ({entry['first_utc']} .. {entry['last_utc']}): "
                 "its timer did not fire or the host was down for the whole session. Check "
                 f"`journalctl MARKET_JOB={entry['job']} MARKET_SESSION={entry['session']}`.")
    else:
        found = stall(entry, summary, stall_after, now, watch.slack_sec + grace)
    if found is not None:  # a stall is critical whatever the job's own severity (which is for
        # its failures and skips); [alerts] overrides can still lower it for this job
        result.findings.append(Finding("missed", found[0], entry["job"], entry["session"],
                                       found[1], "critical"))


def prune_records(config, state_dir: Path, now: datetime) -> None:
    """Periodic jobs' slot records older than retention_days go (hundreds per session)."""
    before = (now - timedelta(days=config.retention_days + 1)).date().isoformat()
    for job in config.jobs:
        if getattr(job, "periodic", None) is not None:
            prune(state_dir, job.name, before)
