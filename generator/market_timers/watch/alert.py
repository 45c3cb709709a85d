"""The one place the deadman, the refresh and status reach the alert layer.

`send_alert` hands the event to `market_timers.alerts.api.raise_alert`, which spools it durably,
keeps the job's last outcome (a "missed" makes the next success announce a recovery) and tries
one delivery, unless `deliver=False`: then market-outbox.timer sends it. Monitoring must never
break the pass that found the problem: whatever goes wrong here is logged and swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from market_timers.alerts import api

log = logging.getLogger("market_timers.watch")


def send_alert(config, *, kind: str, key: str, text: str, job: str = "", session: str = "",
               severity: str | None = None, job_severity: str | None = None,
               title: str | None = None, now: datetime | None = None,
               env: dict | None = None, deliver: bool = True) -> object:
    clock: Callable[[], datetime] | None = (lambda: now) if now is not None else None
    try:
        return api.raise_alert(config, kind=kind, job=job, session=session, text=text, key=key,
                           severity=severity, job_severity=job_severity, title=title, now=clock,
                           env=env, deliver=deliver)
    except Exception:  # raise_alert promises not to raise; be sure of it
        log.exception("could not raise a %s alert", kind)
        return None
