"""The rules, applied: one event (or one tick of the clock) -> the alert router and the store.

Order for an event of kind K (the first rule that matches decides):
1. expected   K is named by an `[[events.expected]]` rule and its job ran (or was due) at most
              `within` before, or the event was sent by that job: a digest line, no alert.
2. incident   K opens or closes an `[[events.incident]]` rule's incident, keyed by (rule, --key).
              The first opening event opens it, later ones join it. A closing event resolves it:
              within `interrupt_after` -> a digest line only; an incident still open once
              `interrupt_after` has passed is alerted by `tick` at that moment (not at its end),
              and its resolution then sends a recovery on the same channels (if `recovery`).
3. count      K has an `[[events.count]]` rule: counted per session; the `threshold`-th event
              sends one alert with the count, the worst --value and the first and last times.
4. severity   `[events.severity]` for K, else the event's own --severity, else
              `default_severity`: critical/warning/info go to the router like any alert (routes,
              fallback, dedup window, repeats and escalation of criticals, `ack`), within the
              bound on one source's messages (flood.py: the rest of its window goes to the
              digest, and one summary says so); "digest" only ever goes to the session digest;
              "off" is recorded and not sent.

Every alert goes through alerts.api.raise_alert with the event's session, so the dedup window,
the critical repeats, `ack` and the digest apply to events and incidents as to job alerts.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from market_timers.alerts import delivery
from market_timers.alerts.api import raise_alert
from market_timers.alerts.model import make_id
from market_timers.alerts.router import chain_for
from market_timers.config.events import EventsConfig, IncidentRule
from market_timers.contracts.severities import SEVERITY_RANK
from market_timers.events.flood import UNNAMED, FloodGate, summary_text
from market_timers.events.plan_lookup import PlanLookup, parse_at
from market_timers.events.store import Store

log = logging.getLogger("market_timers.events")
MAX_KEPT_EVENTS = 50  # per incident, for the digest and `incidents`


def ms(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _secs(d: float) -> str:
    return f"{d:.0f} s" if d >= 10 else f"{d:.1f} s"


class Engine:
    def __init__(self, ctx, cfg: EventsConfig, store: Store, schedule: PlanLookup):
        self.t: datetime | None = None
        self.ctx = replace(ctx, now=self._clock)
        self.cfg = cfg or EventsConfig()
        self.store = store
        self.schedule = schedule
        self.outcomes: list[tuple[str, str]] = []  # (outcome, what) of this run, for logs/tests
        self.spooled: list = []  # alerts spooled in this pass, delivered after it
        self.flood = FloodGate(store.dir, self.cfg.flood_limit,
                               timedelta(seconds=self.cfg.flood_window))

    def _clock(self) -> datetime:
        assert self.t is not None
        return self.t

    def _raise(self, t: datetime, **kw):
        """Spool through the router; the sends are tried by `deliver` once the state is saved
        and the lock released (a slow channel must not hold up the next event or tick)."""
        self.t = t
        alert = raise_alert(self.ctx, deliver=False, **kw)
        if alert is not None:
            self.spooled.append(alert)
        return alert

    def deliver(self) -> None:
        """Try the spooled alerts, the most severe first (a critical never waits behind a
        batch's warnings)."""
        self.spooled.sort(key=lambda a: -SEVERITY_RANK.get(a.severity, 0))
        for alert in self.spooled:
            # At the alert's own instant: a replayed (or delayed) alert is not "10 minutes on
            # its first channel" already, which would skip that channel (fallback_after_minutes).
            self.t = parse_at(alert.created)
            try:
                delivery.try_now(self.ctx, alert)
            except Exception:  # the outbox has it; market-outbox.timer retries
                log.exception("events: immediate delivery of %s failed", alert.id)
        self.spooled = []

    def _note(self, outcome: str, what: str) -> str:
        self.outcomes.append((outcome, what))
        return outcome

    def _chain(self, severity: str) -> list[str]:
        return chain_for(self.ctx.cfg, severity) if self.ctx.cfg.enabled else []

    # one event -----------------------------------------------------------------------------------
    def handle(self, event: dict) -> str:
        at = parse_at(event["at"])
        kind, key = event["kind"], event.get("key") or ""
        session = event.get("session") or self.schedule.session_of(at)
        label = f"{kind}{' ' + key if key else ''}"
        details = {"invocation": event.get("id", ""), "event_kind": kind, "event_key": key,
                   "event_at": event["at"], "source_job": event.get("job") or None,
                   "value": event.get("value")}
        details = {k: v for k, v in details.items() if v not in (None, "")}
        for rule in self.cfg.expected:
            if rule.kind == kind and (event.get("job") == rule.after_job or self.schedule.expected(
                    rule.after_job, at, rule.within)):
                self._raise(at, kind="event", session=session, key=f"expected:{kind}:{key}",
                            severity="info", chain=[], details=details,
                            title=f"{label}: expected after {rule.after_job} (scheduled)",
                            text=event.get("text", ""))
                return self._note("expected", label)
        if (rule := self.cfg.incident_for(kind)) is not None:
            return self._incident(rule, event, at, session, details)
        if (count := self.cfg.count_for(kind)) is not None:
            return self._count(count, event, at, session, details)
        severity = self.cfg.severity.get(kind) or event.get("severity") or \
            self.cfg.default_severity
        title = f"{label}: {event['text']}" if event.get("text") else label
        if severity == "off":
            self.ctx.state.add_event(session, {"at": ms(at), "event": "silent", "kind": "event",
                                               "severity": "off", "title": title, "job": ""})
            return self._note("off", label)
        held = severity != "digest" and not self.flood.admit(event.get("job") or UNNAMED,
                                                             severity, kind, at, session)
        if severity == "digest" or held:  # held: past its source's bound (flood.py)
            self._raise(at, kind="event", session=session, key=f"event:{kind}:{key}",
                        severity="info", chain=[], title=title, details=details)
            return self._note("held" if held else "digest", label)
        alert = self._raise(at, kind="event", session=session, key=f"event:{kind}:{key}",
                            severity=severity, title=title, details=details,
                            text=f"{kind} from {event.get('job') or 'the trading system'} at "
                                 f"{event['at']}" + (f", value {event['value']:g}"
                                                     if event.get("value") is not None else ""))
        return self._note("alert" if alert else "digest", label)

    # incidents -----------------------------------------------------------------------------------
    def _incident(self, rule: IncidentRule, event: dict, at: datetime, session: str,
                  details: dict) -> str:
        kind, key = event["kind"], event.get("key") or "-"
        ikey = f"{rule.name}:{key}"
        inc = self.store.open.get(ikey)
        if kind in rule.open:
            if inc is not None:
                inc["count"] += 1
                if len(inc["events"]) < MAX_KEPT_EVENTS:
                    inc["events"].append({"at": event["at"], "kind": kind})
                self.store.put_incident(inc)
                return self._note("joined", ikey)
            inc = {"id": make_id("incident", ikey, at), "rule": rule.name, "key": key,
                   "session": session, "opened": event["at"], "state": "open",
                   "deadline": ms(at + timedelta(seconds=rule.interrupt_after)),
                   "severity": rule.severity, "count": 1, "alerted": False, "handling": "",
                   "alert_id": None, "chain": [], "events": [{"at": event["at"], "kind": kind}],
                   "text": event.get("text", "")}
            self.store.open[ikey] = inc
            self.store.put_incident(inc)
            if rule.interrupt_after == 0:
                self._alert_incident(rule, inc, at)
            return self._note("opened", ikey)
        if inc is None:  # a close with nothing open (e.g. after a restart of the gateway)
            self._raise(at, kind="event", session=session, key=f"event:{kind}:{key}",
                        severity="info", chain=[], details=details,
                        title=f"{kind} {key}: no open {rule.name} incident")
            return self._note("stray-close", ikey)
        inc["count"] += 1
        if len(inc["events"]) < MAX_KEPT_EVENTS:
            inc["events"].append({"at": event["at"], "kind": kind})
        duration = (at - parse_at(inc["opened"])).total_seconds()
        inc.update(state="resolved", resolved=event["at"], duration_sec=round(duration, 3))
        del self.store.open[ikey]
        name = f"{rule.name} {key}"
        if not inc["handling"] and duration > rule.interrupt_after:
            # Its threshold passed while no tick ran (processor down): alert now, once.
            self._alert_incident(rule, inc, at, late=True)
        elif inc["alerted"] and rule.recovery:
            alert = self._raise(at, kind="recovery", session=inc["session"],
                                key=f"recovery:incident:{ikey}", severity="info",  # good news
                                chain=inc["chain"], details=details,
                                title=f"{name} resolved after {_secs(duration)}",
                                text=f"{kind} at {event['at']}; alert {inc['alert_id']} is "
                                     "resolved.")
            self._close_escalation(inc)
            inc["recovery_id"] = alert.id if alert else None
        elif not inc["handling"]:
            inc["handling"] = "digest"
            self._raise(at, kind="incident", session=inc["session"], key=f"incident:{ikey}",
                        severity="info", chain=[], details=details,
                        title=f"{name}: resolved after {_secs(duration)} (within interrupt_after "
                              f"{rule.interrupt_after} s: not interrupting)")
        else:
            self._close_escalation(inc)
        self.store.put_incident(inc)
        return self._note("resolved", ikey)

    def _alert_incident(self, rule: IncidentRule, inc: dict, t: datetime, late: bool = False):
        kinds = ", ".join(dict.fromkeys(e["kind"] for e in inc["events"]))
        opened = parse_at(inc["opened"])
        name = f"{rule.name} {inc['key']}"
        if late:
            title = f"{name}: lasted {_secs((t - opened).total_seconds())} ({kinds}), resolved"
        elif rule.interrupt_after:
            title = f"{name}: not resolved after {_secs((t - opened).total_seconds())} ({kinds})"
        else:
            title = f"{name}: {kinds}"
        chain = self._chain(inc["severity"])
        alert = self._raise(t, kind="incident", session=inc["session"],
                            key=f"incident:{rule.name}:{inc['key']}", severity=inc["severity"],
                            title=title, details={"incident": inc["id"]},
                            text=f"Incident {inc['id']} opened at {inc['opened']} by "
                                 f"{inc['events'][0]['kind']}" + (f": {inc['text']}"
                                                                  if inc.get("text") else "."))
        if alert is not None:
            inc.update(alerted=True, alert_id=alert.id, chain=list(alert.chain),
                       handling="alerted", alerted_at=ms(t))
        else:
            inc["handling"] = "deduplicated" if chain else "digest"
        if late:  # it is over: no repeats, no recovery to wait for
            self._close_escalation(inc)
        return alert

    def summarise_floods(self, now: datetime) -> None:
        """One message per source and window over that held events back (flood.py)."""
        for entry in self.flood.due_summaries(now):
            title, text = summary_text(entry)
            self._raise(now, kind="event", session=entry["session"], severity=entry["worst"],
                        key=f"flood:{entry['source']}:{entry['window']}", title=title, text=text)

    def _close_escalation(self, inc: dict) -> None:
        if inc.get("alert_id") and self.ctx.escalations.close(inc["alert_id"]):
            self.ctx.escalations.drop_pending_repeats(self.ctx.outbox, [inc["alert_id"]])

    def tick(self, now: datetime) -> int:
        """Alert every open incident whose `interrupt_after` has passed; return how many."""
        n = 0
        for ikey, inc in sorted(self.store.open.items(), key=lambda kv: kv[1]["deadline"]):
            if inc["handling"] or parse_at(inc["deadline"]) >= now:
                continue
            rule = next((r for r in self.cfg.incidents if r.name == inc["rule"]), None)
            if rule is None:  # the rule was removed from the config: close it quietly
                del self.store.open[ikey]
                continue
            self._alert_incident(rule, inc, now)
            self.store.put_incident(inc)
            self._note("threshold", ikey)
            n += 1
        return n

    def next_deadline(self) -> datetime | None:
        pending = [parse_at(i["deadline"]) for i in self.store.open.values() if not i["handling"]]
        return min(pending) if pending else None

    # counts --------------------------------------------------------------------------------------
    def _count(self, rule, event: dict, at: datetime, session: str, details: dict) -> str:
        kind = event["kind"]
        c = self.store.counts().setdefault(f"{session}|{kind}", {
            "session": session, "kind": kind, "count": 0, "threshold": rule.threshold,
            "worst": None, "worst_at": None, "first": event["at"], "last": None,
            "alert_id": None, "handling": ""})
        c["count"] += 1
        c["last"] = event["at"]
        value = event.get("value")
        if value is not None and (c["worst"] is None or (
                value > c["worst"] if rule.worst == "max" else value < c["worst"])):
            c["worst"], c["worst_at"] = value, event["at"]
        if c["count"] == rule.threshold:
            worst = f"worst {c['worst']:g} at {c['worst_at'][11:19]}Z, " if c["worst"] is not None \
                else ""
            alert = self._raise(at, kind="event-count", session=session,
                                key=f"count:{kind}:{session}", severity=rule.severity,
                                details=details,
                                title=f"{kind}: {c['count']} events in session {session}",
                                text=f"{c['count']} {kind} events ({worst}first "
                                     f"{c['first'][11:19]}Z, last {c['last'][11:19]}Z); later "
                                     "ones this session are counted in the digest.")
            c["alert_id"] = alert.id if alert else None
            c["handling"] = "alerted" if alert else "digest"
        self.store.put_count(c)
        return self._note("counted", f"{kind} #{c['count']}")
