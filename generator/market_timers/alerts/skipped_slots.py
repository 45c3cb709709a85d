"""A periodic job's skipped slots as one alert per session (never one per slot): the dead-man
pass and the alert handler both ask. Neither counts here: the handler reads the count the record
step wrote just before it (contracts/slotcount.py), the dead-man passes its own accounting's.
"""

from __future__ import annotations

import logging
import os

from market_timers import ledger
from market_timers.alerts import api
from market_timers.contracts import environment, slotcount
from market_timers.contracts.slotcount import SlotCount

log = logging.getLogger(__name__)

WARNED = ".warned-skips"  # in the session's slot-record directory: the session's warning went out


def warn_once(config, job: str, session: str, summary: SlotCount, job_severity: str | None,
              state_dir, now=None, raise_alert=None) -> bool:
    """The session's one warning about skipped slots, at the first skip. True when raised now.
    Not when no slot ran and none is ahead: that session is a miss, which the dead-man's
    critical says (watch/slots.py), not a count of skips."""
    if not summary.skipped or not (summary.ran or summary.ahead):
        return False
    marker = os.path.join(ledger.slot_records_dir(state_dir, job, session), WARNED)
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as e:
        log.warning("cannot mark the skip warning of %s %s: %s", job, session, e)
        return False
    os.close(fd)
    raise_alert = raise_alert or api.raise_alert
    severity = "info" if job_severity == "info" else "warning"
    text = (summary.text + f". A slot that comes while the previous run is still going is "
            "dropped (never a second copy); the count is kept in the digest and in "
            f"`market-timers status --session {session}`.")
    raise_alert(config, kind="overlap-skipped", job=job, session=session, text=text,
                key=f"slots-skipped:{job}:{session}", job_severity=severity,
                title=f"{job}: slots skipped in session {session}",
                details={"skipped": summary.skipped, "total": summary.total,
                         "first_skipped": summary.first_skipped}, now=now)
    return True


def on_handler(config, info: dict, kind: str, now=None, raise_alert=None) -> bool:
    """Alert handler hook for a periodic job's unit. True: the run was a skip (counted by the
    record step, no alert of its own); False: handle the run as usual (success, failure)."""
    job, session = info.get(environment.JOB), info.get(environment.SESSION)
    if not (job and session and info.get(environment.SLOT_EVERY_SEC)):
        return False
    state_dir = info.get(environment.STATE_DIR) or getattr(config, "state_dir", None)
    if state_dir is None:
        return False
    count = slotcount.read(ledger.slot_records_dir(state_dir, job, session), base=state_dir)
    try:
        if count is not None:
            warn_once(config, job, session, count, info.get(environment.SEVERITY), state_dir,
                      now=now, raise_alert=raise_alert)
    except OSError as e:
        log.warning("cannot warn about the skipped slots of %s %s: %s", job, session, e)
    return kind in ("overlap-skipped", "stale-start")
