"""Try to deliver a spooled alert on its current channel; fall back along its chain.

Transient failures (5xx, network, 429) are retried with backoff, never before the not-before
instant (a 429's retry_after / Retry-After, stored per channel and per alert); a permanent one
(4xx: a malformed message gets the same answer again) moves on at once. After
`fallback_after_attempts` failed attempts or `fallback_after_minutes` on one channel the alert
moves to the next channel. When the chain is exhausted the alert stays in the outbox marked
undeliverable (shown by `outbox list` and `status`) and is tried again from the first channel
every UNDELIVERABLE_RETRY. The alert file is removed only after a confirmed delivery.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from market_timers.alerts.model import PENDING, UNDELIVERABLE, Alert, parse_iso
from market_timers.channels.base import DeliveryError
from market_timers.contracts import journal
from market_timers.contracts.instants import iso
from market_timers.contracts.severities import SEVERITY_RANK

log = logging.getLogger("market_timers.alerts")

UNDELIVERABLE_RETRY = timedelta(minutes=30)
DELIVERED, WAITING, RETRY, GAVE_UP = "delivered", "waiting", "retry", "undeliverable"
BUSY_POLL = 0.1  # seconds between looks at a busy outbox lock


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(30 * 2 ** max(attempts - 1, 0), 600))


def capped(ctx, when, now):
    """A not-before instant, never later than now + [alerts] max_backoff_minutes: a service's
    Retry-After of a year, or a channels.json / outbox file naming year 9999, would otherwise
    silence the channel for as long. The cut is logged."""
    if when is None:
        return None
    limit = now + timedelta(minutes=ctx.cfg.max_backoff_minutes)
    if when <= limit:
        return when
    log.warning("alerts: a back-off until %s is beyond max_backoff_minutes (%g): obeyed until %s",
                iso(when), ctx.cfg.max_backoff_minutes, iso(limit))
    return limit


def _save(ctx, alert: Alert) -> None:
    """Keep the alert's delivery state; a full spool must not stop the flush of the others."""
    try:
        ctx.outbox.put(alert)
    except OSError as e:
        log.error("alert %s: cannot update its outbox file (%s); its last saved state stays",
                  alert.id, e.strerror or type(e).__name__)


def _advance(ctx, alert: Alert, now, reason: str) -> None:
    alert.errors.append(f"{iso(now)} {alert.channel}: {reason}")
    log.warning("alert %s: giving up on %s: %s", alert.id, alert.channel, reason)
    alert.channel_index += 1
    alert.attempts = 0
    alert.channel_since = iso(now)
    alert.not_before = ""


def attempt(ctx, alert: Alert) -> str:
    """One pass over the alert: send on the current channel (or the next ones). Saves the outcome."""
    now = ctx.now()
    if alert.state == UNDELIVERABLE:
        retry_at = capped(ctx, parse_iso(alert.not_before), now)
        if retry_at and now < retry_at:
            return GAVE_UP
        alert.channel_index, alert.attempts, alert.channel_since = 0, 0, ""
    while alert.channel is not None:
        outcome = _on_channel(ctx, alert, now)
        if outcome is not None:
            return outcome
    if alert.state != UNDELIVERABLE:
        log.error("alert %s undeliverable on every channel (%s); kept in the outbox",
                  alert.id, ", ".join(alert.chain) or "no channel configured",
                  extra=journal.about(alert.job, alert.session))
    alert.state = UNDELIVERABLE
    alert.not_before = iso(now + UNDELIVERABLE_RETRY)
    _save(ctx, alert)
    return GAVE_UP


def _on_channel(ctx, alert: Alert, now) -> str | None:
    """One try on the alert's current channel: DELIVERED, WAITING or RETRY (saved), or None when
    the alert moved on to its next channel."""
    name = alert.channel
    since = parse_iso(alert.channel_since)
    if since is None:
        alert.channel_since, since = iso(now), now
    if now - since >= timedelta(minutes=ctx.cfg.fallback_after_minutes):
        _advance(ctx, alert, now, f"not delivered within {ctx.cfg.fallback_after_minutes:g} min"
                 f" (last error: {alert.last_error or 'none'})")
        return None
    stored = ctx.state.channel_not_before(name)
    channel_wait = capped(ctx, stored, now)
    if channel_wait != stored:  # kept cut: a later pass must not cut it again from its own now
        ctx.state.set_channel_not_before(name, channel_wait)
    waits = [t for t in (capped(ctx, parse_iso(alert.not_before), now), channel_wait) if t]
    if waits and now < max(waits):
        alert.not_before = iso(max(waits))
        _save(ctx, alert)
        return WAITING
    try:
        ctx.channel(name).send(alert)
    except DeliveryError as e:
        return _failed(ctx, alert, name, now, e)
    except Exception as e:  # a bug in a channel must not lose the alert
        alert.attempts += 1
        alert.last_error = f"{name}: internal error {type(e).__name__}"
        log.error("alert %s: %s", alert.id, alert.last_error)
        alert.not_before = iso(now + backoff(alert.attempts))
        _save(ctx, alert)
        return RETRY
    ctx.outbox.remove(alert)
    ctx.state.add_event(alert.session, {"at": iso(now), "event": "delivered", "id": alert.id,
                                        "job": alert.job, "kind": alert.kind,
                                        "channel": name, "repeat": alert.repeat})
    log.info("alert %s delivered via %s", alert.id, name,
             extra=journal.about(alert.job, alert.session))
    return DELIVERED


def _failed(ctx, alert: Alert, name: str, now, e: DeliveryError) -> str | None:
    """A failed send: RETRY later on this channel (saved), or None after moving on to the next
    one (a permanent error, or the last allowed attempt)."""
    alert.attempts += 1
    alert.last_error = str(e)
    log.warning("alert %s: %s attempt %d failed: %s", alert.id, name, alert.attempts, e,
                extra=journal.about(alert.job, alert.session))
    if e.permanent:
        _advance(ctx, alert, now, str(e))
        return None
    if e.retry_after is not None:
        until = capped(ctx, now + timedelta(seconds=min(e.retry_after, 10 ** 9)), now)
        ctx.state.set_channel_not_before(name, until)
    else:
        until = now + backoff(alert.attempts)
    alert.not_before = iso(until)
    if alert.attempts >= ctx.cfg.fallback_after_attempts:
        _advance(ctx, alert, now, f"{alert.attempts} failed attempts ({e})")
        return None
    _save(ctx, alert)
    return RETRY


def flush(ctx) -> dict[str, int]:
    """The outbox timer's pass: queue due critical repeats, set aside malformed files (one alert
    each), then try every spooled alert once, criticals first."""
    counts = {DELIVERED: 0, WAITING: 0, RETRY: 0, GAVE_UP: 0, "busy": 0, "quarantined": 0}
    with ctx.outbox.lock(wait=True):
        if ctx.cfg.repeat_minutes > 0:
            ctx.escalations.due_repeats(ctx.outbox, ctx.now(), ctx.cfg.repeat_minutes,
                                        ctx.cfg.escalate_after, ctx.cfg.escalation_channel)
        alerts = ctx.outbox.load_all()
        if ctx.outbox.bad:
            counts["quarantined"] = len(_quarantine(ctx))
            alerts = ctx.outbox.load_all()
        # the most severe first, each severity oldest first: a backlog never holds back a critical
        for alert in sorted(alerts, key=lambda a: -SEVERITY_RANK.get(a.severity, 0)):
            counts[attempt(ctx, alert)] += 1
    return counts


def _quarantine(ctx) -> list:
    """Move the malformed outbox files aside and raise one critical alert for each."""
    from market_timers.alerts.api import raise_alert  # api imports delivery: a cycle at the top

    moved = ctx.outbox.quarantine()
    for bad in moved:
        log.error("outbox: %s is not a valid alert (%s): moved to %s", bad.name, bad.reason,
                  ctx.outbox.quarantine_dir)
        raise_alert(ctx, kind="outbox-quarantined", severity="critical",
                    key=f"outbox-quarantined:{bad.name}",
                    title=f"an outbox file was malformed and set aside: {bad.name}",
                    text=(f"{ctx.outbox.dir}/{bad.name.split('.json')[0]}.json was not a valid "
                          f"alert ({bad.reason}) and was moved to {ctx.outbox.quarantine_dir}/"
                          f"{bad.name}. It may have been an alert that was never delivered: "
                          "look at it (`market-timers outbox list` shows the quarantine)."),
                    deliver=False)
    return moved


def try_now(ctx, alert: Alert) -> str:
    """The immediate try after spooling. Another send in progress (a flush, another alert's
    try) is waited for, within what is left of the process's patience (ctx.busy_patience):
    left to market-outbox.timer, the alert would wait up to a minute; a pass raising many
    alerts beside a long flush waits that long in all, then leaves them to the timer."""
    while True:
        with ctx.outbox.lock(wait=False) as held:
            if held:
                return attempt(ctx, alert) if ctx.outbox.exists(alert) else DELIVERED
        if ctx.busy_patience <= 0:
            return "busy"
        time.sleep(BUSY_POLL)
        ctx.busy_patience -= BUSY_POLL


def send_direct(ctx, alert: Alert) -> str | None:
    """Send on each channel of the chain in turn, once, without the outbox (it cannot persist):
    the name of the channel that confirmed delivery, or None."""
    for name in alert.chain:
        try:
            ctx.channel(name).send(alert)
            return name
        except DeliveryError as e:
            log.warning("alert %s: direct send via %s failed: %s", alert.id, name, e)
        except Exception as e:  # a bug in a channel: the next one may still work
            log.error("alert %s: direct send via %s: internal error %s", alert.id, name,
                      type(e).__name__)
    return None


__all__ = ["attempt", "flush", "send_direct", "try_now", "PENDING"]
