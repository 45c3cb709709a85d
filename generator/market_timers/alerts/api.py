"""The one entry point every flow uses to raise an alert (handler, deadman, refresh).

`raise_alert` records the event for the digest, keeps the job's open incident for its session (so
a success of that session or a newer one announces the recovery), applies the severity rules and
the dedup window (one incident: kind, job, session; alerts/incidents.py), spools the alert
durably and tries one immediate delivery. It never raises because a channel is down or
misconfigured: the outbox has the alert and the outbox timer retries it.
"""

from __future__ import annotations

import logging
import os

from market_timers.alerts.context import AlertContext, context_from
from market_timers.alerts.delivery import send_direct, try_now
from market_timers.alerts.incidents import incident_key, is_try, occurrence, resolves
from market_timers.alerts.model import Alert, make_id
from market_timers.alerts.router import chain_for, effective_severity
from market_timers.contracts import journal
from market_timers.contracts.instants import iso
from market_timers.contracts.outcomes import OUTCOME_OF
from market_timers.contracts.outcomes import title as default_title

log = logging.getLogger("market_timers.alerts")


def raise_alert(config, *, kind: str, job: str = "", session: str = "", text: str = "",
                key: str | None = None, severity: str | None = None,
                job_severity: str | None = None, title: str | None = None,
                details: dict | None = None, chain: list[str] | None = None,
                deliver: bool = True, now=None, env: dict | None = None,
                every_channel: bool = False, alert_id: str | None = None) -> Alert | None:
    """Raise an alert of `kind` ("failed", "missed", "calendar-changed", ...).

    `config` is the loaded Config (or an AlertContext). `severity` forces one; otherwise it comes
    from the [alerts] rules and `job_severity`. Returns the spooled Alert, the earlier alert it was
    folded into (dedup window), or None when nothing is sent at once (kind off, digest, no
    channel). Deadman: `raise_alert(config, kind="missed", job=..., session=..., text=...)`.
    `every_channel`: one incident told on each channel of the chain at once, not in fallback
    order (a halt's); `alert_id`: the incident's own id (a halt's, made from the halt).
    """
    ctx: AlertContext = context_from(config, now=now, env=env)
    try:
        return _raise(ctx, kind, job, session, text, key, severity, job_severity, title,
                      details or {}, chain, deliver, every_channel, alert_id)
    except Exception:  # monitoring never breaks the caller; the traceback names no secret
        log.exception("alerts: could not raise %s alert for %s", kind, job or "-")
        return None


def _raise(ctx, kind, job, session, text, key, severity, job_severity, title, details, chain,
           deliver, every_channel=False, alert_id=None):
    now = ctx.now()
    text, details = _told_where(ctx, kind, text, details)
    key = key or _key(kind, job, session, details)
    sev = severity or effective_severity(ctx.cfg, kind, job, job_severity)
    if chain is None:
        chain = chain_for(ctx.cfg, sev) if (sev and ctx.cfg.enabled) else []
    alert = Alert(id=alert_id or make_id(kind, key, now, details.get("invocation", "")),
                  kind=kind, severity=sev or "info", key=key,
                  title=title or default_title(kind, job, session, details.get("status", ""),
                                               details.get("result", "")),
                  text=text, job=job, session=session, created=iso(now), details=details,
                  chain=list(chain), channel_since=iso(now),
                  fanout=list(chain) if every_channel and len(chain) > 1 else [])
    event = {"at": iso(now), "event": "alert", "id": alert.id, "job": job, "kind": kind,
             "severity": sev or "off", "title": alert.title, "channels": chain}
    spooled = False
    try:
        with ctx.state.locked():
            if job and kind in OUTCOME_OF:
                ctx.state.set_job_outcome(job, OUTCOME_OF[kind], now,
                                          session=occurrence(session, details.get("slot") or ""),
                                          alert_id=alert.id, chain=chain,
                                          severity=alert.severity)
            if sev is None or not ctx.cfg.enabled:
                ctx.state.add_event(session, {**event, "event": "silent"})
                return None
            if not chain:
                ctx.state.add_event(session, {**event, "event": "digest"})
                return None
            earlier = None if kind == "recovery" else \
                ctx.state.dedup_hit(key, now, ctx.cfg.dedup_minutes)
            if earlier:
                _fold(ctx, alert, earlier, event, now)
                return None
            copies = ctx.outbox.put_copies(alert)  # durable before any send
            spooled = True
            ctx.state.dedup_record(key, alert.id, now, ctx.cfg.dedup_minutes)
            ctx.state.add_event(session, event)
            if sev == "critical" and kind != "recovery" and ctx.cfg.repeat_minutes > 0:
                ctx.escalations.open(alert, now, ctx.cfg.repeat_minutes)
    except Exception as e:  # a full spool, a broken or corrupted state must not drop the alert
        if spooled:
            log.error("alerts: alert %s is spooled but its state could not be kept (%s)",
                      alert.id, getattr(e, "strerror", None) or type(e).__name__)
        elif sev is not None and ctx.cfg.enabled and chain:
            return _deliver_unspooled(ctx, alert, e)
        else:
            log.error("alerts: could not record %s for %s: %s", kind, job or "-",
                      getattr(e, "strerror", None) or type(e).__name__)
            return None
    log.info("alert %s (%s, %s) spooled for %s: %s", alert.id, kind, sev, ",".join(chain),
             alert.title, extra=journal.about(alert.job, alert.session))
    if deliver:
        for copy in copies:
            try_now(ctx, copy)
    return alert


def _key(kind: str, job: str, session: str, details: dict) -> str:
    """A job's outcome is one incident per (kind, job, session[, slot]); another alert's key is
    its kind and what it is about."""
    if job and kind in OUTCOME_OF:
        return incident_key(kind, job, session, str(details.get("slot") or ""))
    return f"{kind}:{job or session}"


def _told_where(ctx, kind: str, text: str, details: dict) -> tuple[str, dict]:
    """The text with the broken config's note, and the details with the host (and cluster
    node) that raised the alert: every alert names them."""
    if ctx.note and kind != "config-broken":  # that alert lists the problems itself
        text = f"{text}\n\n{ctx.note}" if text else ctx.note
    return text, {"host": os.uname().nodename, **({"node": ctx.node} if ctx.node else {}),
                  **details}


def _fold(ctx, alert: Alert, earlier: str, event: dict, now) -> None:
    """The same key inside the dedup window: no new alert, the earlier one counts it (state
    locked by the caller)."""
    job, session, kind = alert.job, alert.session, alert.kind
    if job and kind in OUTCOME_OF:  # the recovery names the alert the user saw
        ctx.state.set_job_outcome(job, OUTCOME_OF[kind], now,
                                  session=occurrence(session, alert.details.get("slot") or ""),
                                  alert_id=earlier, chain=alert.chain, severity=alert.severity)
    ctx.state.add_event(session, {**event, "event": "deduplicated", "id": earlier})
    log.info("alert %s folded into %s (same key %s inside the dedup window)",
             alert.id, earlier, alert.key, extra=journal.about(job, session))
    _count_suppressed(ctx, earlier)


def _deliver_unspooled(ctx, alert: Alert, error: Exception) -> Alert:
    """The outbox could not persist the alert (ENOSPC...): send it now, once, best effort, and
    say so in the same message. Nothing was left behind in the spool (safefs removes its temp
    file on any failure)."""
    reason = getattr(error, "strerror", None) or type(error).__name__
    alert.text = (f"{alert.text}\n\n" if alert.text else "") + (
        f"WARNING: the outbox could not save this alert ({reason}, {ctx.outbox.dir}): it is "
        "sent once, directly, and will not be retried or repeated. Free the spool filesystem "
        f"({ctx.spool_dir}).")
    channel = send_direct(ctx, alert)
    if channel:
        log.error("alert %s (%s) could not be spooled (%s); delivered directly via %s",
                  alert.id, alert.kind, reason, channel)
    else:
        log.error("alert %s could not be spooled (%s) NOR delivered on %s: %s", alert.id,
                  reason, ", ".join(alert.chain) or "no channel", alert.title)
    return alert


def _count_suppressed(ctx, alert_id: str) -> None:
    """Count a folded alert on the spooled original (if still waiting) and on its repeats."""
    for spooled in ctx.outbox.load_all():
        if spooled.id == alert_id:
            spooled.suppressed += 1
            ctx.outbox.put(spooled)
    record = ctx.escalations.record(alert_id)
    if record is not None:
        record["alert"]["suppressed"] = record["alert"].get("suppressed", 0) + 1
        ctx.escalations.save(alert_id, record)


def resolve_incident(config, key_prefix: str, now=None, env: dict | None = None) -> list[str]:
    """The incident whose alerts' keys start with `key_prefix` is over (a halt lifted): its
    criticals stop repeating and their queued repeats go. Returns the ids closed."""
    ctx: AlertContext = context_from(config, now=now, env=env)
    try:
        with ctx.state.locked():
            closed = ctx.escalations.close_incident(key_prefix)
        if closed:
            ctx.escalations.drop_pending_repeats(ctx.outbox, closed)
        return closed
    except Exception:  # monitoring never breaks the caller
        log.exception("alerts: could not resolve the incident %s", key_prefix)
        return []


def record_success(config, *, job: str, session: str = "", details: dict | None = None,
                   now=None, env: dict | None = None) -> Alert | None:
    """A run of `job` for `session` succeeded: it resolves the open incidents of that session and
    of older ones (their repeats stop), and announces the recovery when it resolved any. A newer
    session's incident stays open; a try resolves nothing."""
    ctx: AlertContext = context_from(config, now=now, env=env)
    details = details or {}
    this = occurrence(session, str(details.get("slot") or ""))
    try:
        t = ctx.now()
        with ctx.state.locked():
            ctx.state.add_event(session, {"at": iso(t), "event": "run", "job": job,
                                          "kind": "ok", "duration": details.get("duration")})
            if is_try(session):
                return None
            incidents = ctx.state.open_incidents(job)
            resolved = {s: v for s, v in incidents.items() if resolves(this, s)}
            still = {s: v for s, v in incidents.items() if s not in resolved}
            ctx.state.set_job_outcome(job, "ok", t, session=this, still_open=still)
            closed = ctx.escalations.close_job(job, lambda s: resolves(this, s))
        if closed:
            ctx.escalations.drop_pending_repeats(ctx.outbox, closed)
        if not resolved:
            return None
        return _announce_recovery(ctx, job, session, resolved, still, details)
    except Exception:
        log.exception("alerts: could not record the success of %s", job)
        return None


def _announce_recovery(ctx, job: str, session: str, resolved: dict, still: dict,
                       details: dict) -> Alert | None:
    """The recovery alert: which sessions' incidents it resolves, which are still failed."""
    parts = []
    for s, inc in sorted(resolved.items()):
        alert = f"; alert {inc['alert_id']} is resolved" if inc.get("alert_id") else ""
        parts.append(f"The previous run ({s or '?'}) had {inc.get('outcome', 'failed')}{alert}.")
    if still:
        parts.append("Not resolved by this run (a newer session), still failed: "
                     + ", ".join(sorted(still)) + ".")
        details = {**details, "still_failed": sorted(still)}
    newest = resolved[max(resolved)]
    return raise_alert(ctx, kind="recovery", job=job, session=session, text="\n".join(parts),
                       key=f"recovery:{job}:{session}", severity="info",  # good news
                       chain=newest.get("chain") or [], details=details)
