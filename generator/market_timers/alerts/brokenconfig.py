"""The alert of a broken config: one critical "config-broken" alert per content of the file, keyed
on its sha256 and remembered in `<state_dir>/alerts/config-broken.json` (MARKER), forgotten (and
its repeats stopped) once the file loads again. The commands of the alert path call `announce`
once they run as the service user (the degraded load itself: snapshot.py).
"""

from __future__ import annotations

import logging
import os
import re

from market_timers.alerts.api import raise_alert
from market_timers.alerts.context import context_from
from market_timers.contracts.instants import iso
from market_timers.files import safefs

log = logging.getLogger("market_timers.alerts")
MARKER = "config-broken.json"


def announce(config, now=None, env=None) -> object:
    """One critical alert per content of a broken config file; nothing when it loads."""
    ctx = context_from(config, now=now, env=env)
    marker = ctx.state.dir / MARKER
    broken = getattr(config, "broken", None)  # snapshot.Broken: set by the degraded load
    if broken is None:
        seen = ctx.state.read(marker)
        if seen is not None:  # fixed: a new break alerts again; stop the old alert's repeats
            alert_id = seen.get("alert_id") if isinstance(seen, dict) else None
            if isinstance(alert_id, str) and re.fullmatch(r"[0-9]{4}-[0-9a-f]{8}", alert_id):
                ctx.escalations.close(alert_id)
            safefs.unlink(marker, base=ctx.state.base)
            log.info("alerts: the config loads again; the broken-config alert is closed")
        return None
    try:
        with ctx.state.locked():
            seen = ctx.state.read(marker, {}) or {}
            if seen.get("sha256") == broken.sha256:
                return None
            ctx.state.write(marker, {"sha256": broken.sha256, "at": iso(ctx.now()),
                                     "source": broken.source})
    except OSError as e:  # cannot remember: alert anyway (a repeat beats silence)
        log.error("alerts: cannot record the broken config in %s: %s", marker, e.strerror)
    for line in broken.problems:
        log.error("alerts: %s", line)
    text = (f"{broken.source} does not load ({len(broken.problems)} problem(s)):\n"
            + "\n".join(broken.problems[:20])
            + ("\n…" if len(broken.problems) > 20 else "")
            + "\n\nThe timers already installed keep firing; job failures, misses and the outbox "
              f"are handled with {broken.how}. Fix the file and run "
              "`market-timers sync` (`market-timers plan` shows every problem).")
    # Once per content is the marker's job; the random part keeps the dedup window from folding
    # a break that comes back after a fix into the first one.
    alert = raise_alert(config, kind="config-broken", severity="critical",
                        key=f"config-broken:{broken.sha256[:16]}:{os.urandom(4).hex()}",
                        title=f"config {broken.source} is broken", text=text,
                        details={"invocation": broken.sha256[:16]}, now=ctx.now, env=env)
    if alert is not None:
        try:
            with ctx.state.locked():
                ctx.state.write(marker, {"sha256": broken.sha256, "at": iso(ctx.now()),
                                         "source": broken.source, "alert_id": alert.id})
        except OSError as e:  # the alert is out; only its later closing needs the id
            log.warning("alerts: cannot record the broken-config alert id: %s", e.strerror)
    return alert
