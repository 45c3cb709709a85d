"""The dead-man's look at the job units' endings (issue 46): the job units have no OnFailure= of
their own; their record step leaves an end record that market-alert-ends tells
(contracts/endrecord.py, alerts/runends.py). Two ways that could leave no one told:

* the handler is stuck or dead: an end record waits for more than STUCK_SEC. The heartbeat pings
  /fail at every pass while it lasts, and one critical `alert-handler-stuck` alert per outage
  says "alert handler stuck: N run endings waiting since ..." (through the dead-man's own alert
  path; the outage's start is kept in <state_dir>/ends.stuck until the directory drains).
* the record step never ran (the unit failed before any process ran, 226/NAMESPACE; the step
  was killed; a start-limit-hit): the unit is failed and left no record. One `list-units
  --state=failed` per pass; a failed job unit that nobody was told of (no mark in ends.told/,
  no record waiting) is a `failed` alert of its job, and marked told.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime

from market_timers.contracts import endrecord, unitname
from market_timers.contracts.instants import iso
from market_timers.watch.findings import Finding

log = logging.getLogger("market_timers.watch")

STUCK_SEC = 120
STUCK_MARKER = "ends.stuck"
FORGET_SEC = 600  # a mark of a unit no longer failed is kept this long: it may be settling
SWEEP_GLOB = "market-*@*.service"  # every job unit's service (the templates' too: SWEPT sorts)
SWEPT = (unitname.FIRE, unitname.PERIODIC, unitname.DAILY, unitname.TRY)  # no OnFailure= of their own


def check_ends(config, systemctl, now: datetime, result) -> None:
    """Append this pass's findings about the endings to result (findings and new); a check
    that breaks is a part not working, as own_parts' (the heartbeat pings /fail), never raised."""
    try:
        waiting = endrecord.pending(config.state_dir)
        stuck(config, now, waiting, result)
        for finding in untold(config, systemctl, now, waiting):
            result.findings.append(finding)
            result.new.append(finding)
    except Exception as e:
        log.exception("deadman: cannot check the job units' endings")
        result.unhealthy.append(f"cannot check the job units' endings: {type(e).__name__}")


def stuck(config, now: datetime, waiting: list[tuple[float, str]], result) -> None:
    marker = os.path.join(os.fspath(config.state_dir), STUCK_MARKER)
    old = [m for m, _ in waiting if now.timestamp() - m > STUCK_SEC]
    if not old:
        if os.path.exists(marker):
            os.unlink(marker)
        return
    since = iso(datetime.fromtimestamp(old[0], UTC))
    headline = f"alert handler stuck: {len(waiting)} run endings waiting since {since}"
    result.unhealthy.append(headline)
    if os.path.exists(marker):
        return
    text = (f"{headline} in {endrecord.directory(config.state_dir)}: the job runs that ended "
            "since then were not alerted, failures included. Check `systemctl status "
            "market-alert-ends.path market-alert-ends.service` and `journalctl -u "
            "market-alert-ends.service`; `systemctl start market-alert-ends.service` tells them.")
    result.findings.append(Finding("alert-handler-stuck", f"alert-handler-stuck:{since}", "", "",
                                   text, headline=headline))
    result.new.append(result.findings[-1])
    with open(marker, "w", encoding="utf-8") as f:
        f.write(since + "\n")


def untold(config, systemctl, now: datetime, waiting: list[tuple[float, str]]) -> list[Finding]:
    """The failed job units with no record waiting that nobody was told of (marked told now)."""
    state_dir = config.state_dir
    failed = {u for u in systemctl.failed_units([SWEEP_GLOB])
              if (n := unitname.parse(u)) is not None and n.kind in SWEPT}
    told = endrecord.told(state_dir)
    for unit, when in told.items():
        if unit not in failed and now.timestamp() - when > FORGET_SEC:
            endrecord.forget_told(state_dir, unit)
    fresh = sorted(failed - set(told))
    if not fresh:
        return []
    ends = endrecord.directory(state_dir)
    coming = set()
    for _, name in waiting:
        try:
            coming.add(endrecord.read(os.path.join(ends, name)).unit)
        except endrecord.BadRecord:
            continue  # the handler sets it aside and alerts it
    severities = {j.name: getattr(j, "severity", None) for j in getattr(config, "jobs", [])}
    out = []
    for unit in fresh:
        if unit in coming:
            continue  # its record waits: the handler tells it
        out.append(_failed_finding(unit, now, severities))
        endrecord.mark_told(state_dir, unit)
    return out


def _failed_finding(unit: str, now: datetime, severities: dict) -> Finding:
    name = unitname.parse(unit)
    session = name.session if name.kind != unitname.DAILY else now.date().isoformat()
    headline = (f"{name.job} failed for session {session}: its unit {unit} failed and left no "
                "run ending")
    text = (f"{unit} is failed and its record step (ExecStopPost=) left no end record, so no "
            "handler told its end: the unit failed before any process ran (226/NAMESPACE, a "
            "missing credential...), it hit its start limit, or the record step was killed. "
            f"Check `systemctl status {unit}` and `journalctl -u {unit}`.")
    log.error("deadman: %s", headline)
    return Finding("failed", f"unit-failed:{unit}", name.job, session, text,
                   severities.get(name.job) or "critical", headline=headline)
