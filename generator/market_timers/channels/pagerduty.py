"""PagerDuty Events API v2: `trigger` an incident, `resolve` it on the job's recovery.

POST `{api_base}/v2/enqueue` with the integration's routing key (a credential). Every alert about
one job (its failures, its misses and its recovery) carries the same `dedup_key`, derived from
the alert key (`failed:signal`, `missed:signal`, `recovery:signal` -> `job:signal`) and the
source host: a repeat or a second failure updates the open incident instead of opening another,
and the recovery resolves it. Other alerts (calendar changes, a broken config) are keyed on their
own alert key. Severity: critical, warning and info map to PagerDuty's of the same name.

Answers: 202 `{"status": "success", "dedup_key": ...}` is delivered; 429 is transient (honouring
Retry-After when sent); 400 (an invalid event: the same event gives the same answer) and other
4xx are permanent; 5xx and network errors are transient. `summary` is cut to PagerDuty's 1024
characters; the whole text (up to 64 KiB) goes into `custom_details`.
`alert --test pagerduty` triggers and then resolves a test incident, so nobody stays paged.
"""

from __future__ import annotations

import hashlib
import socket

from market_timers.channels import spec
from market_timers.channels.base import HttpChannel
from market_timers.channels.textfit import cut
from market_timers.contracts.outcomes import OUTCOME_OF

LIMIT = 1024  # payload.summary, in characters
DETAILS_LIMIT = 65536  # custom_details.text, in UTF-8 bytes (the whole event may be 512 KB)
JOB_KINDS = frozenset(OUTCOME_OF) | {"recovery"}  # a failure or miss of a job, and its end
SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def fit(alert) -> str:
    return cut(alert.subject(), LIMIT)


def dedup_key(alert, source: str) -> str:
    kind, _, subject = alert.key.partition(":")
    base = f"job:{alert.job or subject}" if kind in JOB_KINDS else alert.key
    key = f"market-timers:{source}:{base}"
    if len(key) > 255:  # PagerDuty's limit
        key = f"market-timers:{hashlib.sha256(key.encode()).hexdigest()}"
    return key


class PagerDutyChannel(HttpChannel):
    name = "pagerduty"

    def unconfirmed(self, response):
        return None if response.data.get("status", "success") == "success" else "status=success"

    def error_code(self, response):
        errors = response.data.get("errors")
        return str(response.data.get("message") or "") + (
            f": {'; '.join(map(str, errors))}" if isinstance(errors, list) and errors else "")

    def send(self, alert) -> None:
        routing_key = self.secret(self.settings.routing_key_credential)
        source = self.settings.source or socket.gethostname() or "market-timers"
        key = dedup_key(alert, source)
        if alert.kind == "recovery":  # not while a newer session of the job is still failed
            if alert.details.get("still_failed"):
                return
            self._post({"routing_key": routing_key, "event_action": "resolve", "dedup_key": key})
            return
        self._post({
            "routing_key": routing_key, "event_action": "trigger", "dedup_key": key,
            "client": "market-timers",
            "payload": {
                "summary": fit(alert), "source": source,
                "severity": SEVERITY.get(alert.severity, "critical"),
                "timestamp": alert.created or None, "component": alert.job or None,
                "group": alert.session or None, "class": alert.kind,
                "custom_details": {"alert_id": alert.id, "repeat": alert.repeat,
                                   "text": alert.body(excerpt_limit=DETAILS_LIMIT,
                                                      measure=utf8_len)},
            },
        })
        if alert.kind == "test":  # shown in PagerDuty, then closed: a test pages nobody for long
            self._post({"routing_key": routing_key, "event_action": "resolve", "dedup_key": key})

    def _post(self, event: dict) -> None:
        if isinstance(event.get("payload"), dict):
            event["payload"] = {k: v for k, v in event["payload"].items() if v is not None}
        url = f"{self.settings.api_base.rstrip('/')}/v2/enqueue"
        self.send_json(url, event)


SPEC = spec.ChannelSpec(
    name="pagerduty",
    summary="a PagerDuty Events API v2 event: trigger on an alert, resolve on the job's recovery "
            "(one dedup_key per job and host)",
    settings=(
        spec.credential("routing_key_credential", "market-timers.pagerduty-routing-key",
                        "the credential holding the integration's routing key"),
        spec.url("api_base", "https://events.pagerduty.com", "the Events API base URL"),
        spec.text("source", doc="the event's source (default: the host name)"),
        spec.timeout(),
    ),
    channel=PagerDutyChannel, fit=fit, fits="subject", limit=LIMIT,
)
