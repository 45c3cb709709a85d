"""A periodic job's skipped slots as one alert per session (never one per slot): the dead-man
pass and the alert handler both ask; the slot records and their accounting are the runner's
(runner/slotrecords.py, runner/slotaccount.py).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime

from market_timers.contracts import environment
from market_timers.runner.slotaccount import Summary, account
from market_timers.runner.slotclock import PeriodicSlots
from market_timers.runner.slotrecords import WARNED, session_dir

log = logging.getLogger(__name__)


def warn_once(config, job: str, session: str, summary: Summary, job_severity: str | None,
              state_dir, now=None, raise_alert=None) -> bool:
    """The session's one warning about skipped slots, at the first skip. True when raised now.
    Not when no slot ran and none is ahead: that session is a miss, which the dead-man's
    critical says (watch/slots.py), not a count of skips."""
    if not summary.skipped or not (summary.ran or summary.ahead):
        return False
    marker = session_dir(state_dir, job, session) / WARNED
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as e:
        log.warning("cannot mark the skip warning of %s %s: %s", job, session, e)
        return False
    os.close(fd)
    if raise_alert is None:
        from market_timers.alerts.api import raise_alert
    severity = "info" if job_severity == "info" else "warning"
    text = (summary.text(job) + f". A slot that comes while the previous run is still going is "
            "dropped (never a second copy); the count is kept in the digest and in "
            f"`market-timers status --session {session}`.")
    raise_alert(config, kind="overlap-skipped", job=job, session=session, text=text,
                key=f"slots-skipped:{job}:{session}", job_severity=severity,
                title=f"{job}: slots skipped in session {session}",
                details={"skipped": summary.skipped, "total": summary.total,
                         "first_skipped": summary.first_skipped}, now=now)
    return True


def on_handler(config, info: dict, kind: str, now=None, raise_alert=None) -> bool:
    """Alert handler hook for a periodic job's unit. True: the run was a skip (counted, no alert
    of its own); False: handle the run as usual (success, failure)."""
    try:
        schedule = PeriodicSlots.from_env(info)
        job, session = info[environment.JOB], info[environment.SESSION]
    except (KeyError, ValueError):
        return False
    if schedule is None:
        return False
    state_dir = info.get(environment.STATE_DIR) or getattr(config, "state_dir", None)
    if state_dir is None:
        return False
    t = now() if callable(now) else (now or datetime.now(UTC))
    try:
        summary = account(state_dir, job, session, schedule,
                          int(info.get(environment.GRACE_SEC, "0")), t)
        warn_once(config, job, session, summary, info.get(environment.SEVERITY), state_dir,
                  now=now, raise_alert=raise_alert)
    except OSError as e:
        log.warning("cannot account the slots of %s %s: %s", job, session, e)
    return kind in ("overlap-skipped", "stale-start")
