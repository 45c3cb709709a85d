"""CLI entry functions (wired by cli/commands.py). Each takes the loaded Config and returns an
exit code.

market-timers alert --test CHANNEL     alert_test
market-timers alert-handler MODE UNIT  alert_handler   (always 0: the outbox has the alert)
market-timers alert-handler ends       alert_handler   (market-alert-ends.service: end records)
market-timers outbox list [--json]     outbox_list
market-timers outbox flush             outbox_flush    (market-outbox.timer, every minute)
market-timers ack ID                   ack
market-timers alerts [--json]          alerts_list
market-timers digest [--session DATE]  digest
market-timers status                   outbox_summary  (a dict for the status output)
"""

from __future__ import annotations

import json
import logging
import re
import sys

from market_timers.alerts import delivery, handler, openlist, snapshot
from market_timers.alerts import digest as digest_mod
from market_timers.alerts.context import AlertContext, context_from
from market_timers.alerts.model import UNDELIVERABLE, Alert, make_id
from market_timers.channels.base import DeliveryError
from market_timers.config.alerts import CHANNELS
from market_timers.contracts import journal
from market_timers.contracts.instants import iso
from market_timers.ledger.halts import in_force

log = logging.getLogger("market_timers.alerts")
ID_RE = re.compile(r"[0-9]{4}-[0-9a-f]{8}")  # model.make_id


def _announce(config, now=None, env=None) -> None:
    """A broken live config is a critical alert of its own (once per content of the file)."""
    if isinstance(config, AlertContext):
        return
    try:
        snapshot.announce(config, now=now, env=env)
    except Exception:  # the command's own work comes first
        log.exception("could not announce the broken config")



def alert_test(config, channel: str, now=None) -> int:
    """Send a test message straight to CHANNEL (not spooled); 0 on confirmed delivery."""
    ctx = context_from(config, now=now)
    if channel not in CHANNELS:
        print(f"market-timers: unknown channel {channel!r} (one of {', '.join(CHANNELS)})",
              file=sys.stderr)
        return 2
    if getattr(ctx.cfg, channel) is None:
        print(f"market-timers: channel {channel} is not configured ([alerts.{channel}])",
              file=sys.stderr)
        return 1
    t = ctx.now()
    alert = Alert(id=make_id("test", channel, t), kind="test", severity="info",
                  key=f"test:{channel}", title=f"market-timers test message ({channel})",
                  text=f"Sent by `market-timers alert --test {channel}` at {iso(t)}.",
                  created=iso(t))
    try:
        ctx.channel(channel).send(alert)
    except DeliveryError as e:
        kind = "permanent" if e.permanent else "transient"
        print(f"market-timers: {kind} failure: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # its text could embed a URL, hence a secret: name the type only
        print(f"market-timers: {channel}: internal error {type(e).__name__}", file=sys.stderr)
        return 1
    print(f"{channel}: test message delivered (id {alert.id})")
    return 0


def alert_handler(config, mode: str, unit: str = "", env=None, run=None, now=None) -> int:
    journal.setup()
    if mode not in ("failure", "success", "ends") or (mode == "ends") == bool(unit):
        print(f"market-timers: alert-handler takes failure UNIT, success UNIT or ends, not "
              f"{mode!r} {unit!r}", file=sys.stderr)
        return 2
    _announce(config, now=now, env=env)
    if mode == "ends":  # market-alert-ends.service: the job units' end records
        from market_timers.alerts import runends

        kwargs = {"run": run} if run else {}
        try:
            runends.handle_all(config, env=env, now=now, **kwargs)
        except Exception:  # never fail: the path unit would stop starting it for good
            log.exception("alert handler: the end records could not be read")
        return 0
    try:
        kwargs = {"run": run} if run else {}
        handler.handle(config, mode, unit, env=env, now=now, **kwargs)
    except Exception:  # the job already ran; never fail its handler because of alerting
        log.exception("alert handler for %s failed", unit)
    return 0


def _rows(ctx) -> list[dict]:
    return [{"id": a.id, "spool": a.spool_name, "kind": a.kind, "severity": a.severity,
             "job": a.job, "session": a.session, "created": a.created, "state": a.state,
             "channel": a.channel, "chain": a.chain, "attempts": a.attempts,
             "not_before": a.not_before, "last_error": a.last_error, "errors": a.errors,
             "repeat": a.repeat, "suppressed": a.suppressed, "title": a.title}
            for a in ctx.outbox.load_all()]


def _bad_row(bad, state: str, where) -> dict:
    """A file that is not a valid alert, in the same shape as the alerts' rows."""
    return {"id": "", "spool": bad.name, "kind": "", "severity": "", "job": "", "session": "",
            "created": "", "state": state, "channel": None, "chain": [], "attempts": 0,
            "not_before": "", "last_error": bad.reason, "errors": [], "repeat": 0,
            "suppressed": 0, "title": f"not a valid alert: {bad.reason}", "reason": bad.reason,
            "where": str(where)}


def outbox_list(config, as_json: bool = False) -> int:
    ctx = context_from(config)
    rows = _rows(ctx)
    bad = [_bad_row(b, "malformed", ctx.outbox.dir) for b in ctx.outbox.bad]
    bad += [_bad_row(b, "quarantined", ctx.outbox.quarantine_dir)
            for b in ctx.outbox.quarantined()]
    if as_json:
        print(json.dumps(rows + bad, indent=1))
        return 0
    if not rows and not bad:
        if not ctx.cfg.configured():  # nothing is spooled at all: say why
            print("outbox empty: no alert channel is configured (no [alerts.<channel>] table, "
                  "e.g. [alerts.telegram], in the config), so no alert is sent; failures show "
                  "in the journal and in `market-timers status`")
        else:
            print("outbox empty: every alert was delivered")
        return 0
    for r in rows:
        where = r["channel"] or "-"
        print(f"{r['spool']:<20} {r['state']:<13} {r['severity']:<8} {where:<9} "
              f"tries={r['attempts']} next>={r['not_before'] or 'now'} {r['title']}")
        if r["last_error"]:
            print(f"{'':<20} last error: {r['last_error']}")
    for b in bad:
        print(f"{b['spool']:<20} {b['state']:<13} {b['reason']} (in {b['where']})")
    return 0


def outbox_flush(config, now=None) -> int:
    journal.setup()
    _announce(config, now=now)
    ctx = context_from(config, now=now)
    try:
        counts = delivery.flush(ctx)
    except Exception:
        log.exception("outbox flush failed")
        return 1
    if any(counts.values()):
        log.info("outbox: %s", ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    return 0


def ack(config, alert_id: str, now=None) -> int:
    """Stop the repeats of an open critical alert. A malformed or unknown id is refused (exit 2):
    an id is part of a file name, and `ack ../../plan` used to delete plan.json."""
    if not ID_RE.fullmatch(alert_id or ""):
        print(f"market-timers ack: {alert_id!r} is not an alert id (MMDD-xxxxxxxx, 8 hex digits, "
              "as shown in the alert and by `market-timers outbox list`)", file=sys.stderr)
        return 2
    ctx = context_from(config, now=now)
    record = ctx.escalations.record(alert_id) or {}
    with ctx.state.locked():
        marked = ctx.state.acknowledge(alert_id, ctx.now())
    if ctx.escalations.close(alert_id):
        ctx.escalations.drop_pending_repeats(ctx.outbox, [alert_id])
        ctx.state.add_event("ack", {"at": iso(ctx.now()), "event": "ack", "id": alert_id})
        channels = record.get("alert", {}).get("fanout") or []
        print(f"{alert_id}: acknowledged, no more repeats"
              + (f" on any channel ({', '.join(channels)})" if channels else ""))
        return 0
    if marked:
        ctx.state.add_event("ack", {"at": iso(ctx.now()), "event": "ack", "id": alert_id})
        print(f"{alert_id}: acknowledged (it does not repeat; its session's success resolves it)")
        return 0
    print(f"market-timers ack: no open critical alert nor unacknowledged incident with id "
          f"{alert_id} (already acknowledged, "
          "recovered, or never alerted; `market-timers alerts` lists the open ones)",
          file=sys.stderr)
    return 2


def alerts_list(config, as_json: bool = False, now=None) -> int:
    """`market-timers alerts`: the open incidents and the command that acknowledges each."""
    ctx = context_from(config, now=now)
    rows = openlist.open_rows(ctx)
    print(json.dumps(rows, indent=1) if as_json else "\n".join(openlist.lines(rows)))
    return 0


def digest(config, session: str | None = None, now=None, incidents=None) -> int:
    journal.setup()
    ctx = context_from(config, now=now)
    session = session or ctx.now().date().isoformat()
    halts = None
    if getattr(config, "state_dir", None) is not None and getattr(config, "jobs", None) is not None:
        halts = in_force(config)  # with [cluster], the halts made on any node
    alert = digest_mod.digest_alert(ctx, session, incidents, halts)
    if ctx.cfg.email is None:
        print(alert.text)
        print("(no [alerts.email] configured: digest printed, not mailed)", file=sys.stderr)
        return 0
    ctx.outbox.put(alert)
    outcome = delivery.try_now(ctx, alert)
    if outcome == delivery.GAVE_UP:
        [spooled] = [a for a in ctx.outbox.load_all() if a.spool_name == alert.spool_name] or [alert]
        print(f"market-timers digest {session}: undeliverable ({spooled.last_error or 'no channel'})"
              "; kept in the outbox (market-timers outbox list)", file=sys.stderr)
        return 1
    if outcome != delivery.DELIVERED:
        print(f"digest {session}: {outcome}; kept in the outbox, market-outbox.timer retries it")
        return 0
    print(f"digest {session}: {outcome}")
    return 0


def outbox_summary(config) -> dict:
    try:
        alerts = context_from(config).outbox.load_all()
    except OSError:
        return {"pending": 0, "undeliverable": 0, "pending_ids": [], "undeliverable_ids": [],
                "oldest_pending_utc": None}
    bad = [a.spool_name for a in alerts if a.state == UNDELIVERABLE]
    good = [a for a in alerts if a.state != UNDELIVERABLE]
    # the oldest one waiting: an outbox that does not empty is the desk's health (the page)
    oldest = min((a.created for a in good if a.created), default=None)
    return {"pending": len(good), "undeliverable": len(bad),
            "pending_ids": [a.spool_name for a in good], "undeliverable_ids": bad,
            "oldest_pending_utc": oldest}
