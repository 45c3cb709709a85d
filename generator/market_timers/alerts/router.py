"""Which severity an event gets and which channels, in order, it goes to.

Severity: `[alerts.overrides.<job>]` first, then `[alerts.kind_severity]`; "job" means the job's
own severity, and a fixed severity is capped at the job's (a kind lowers a job's alerts, never
raises them); "off" silences the kind. Channels: the severity's route first, then the
`fallback` order, keeping only configured channels. A route to "digest" sends nothing at once:
the event waits for the session's email digest.
"""

from __future__ import annotations

from market_timers.config.alerts import (  # noqa: F401  (router.chain_for for callers)
    SEVERITIES,
    AlertsConfig,
    chain_for,
)
from market_timers.contracts.severities import SEVERITY_RANK


def effective_severity(cfg: AlertsConfig, kind: str, job: str = "",
                       job_severity: str | None = None) -> str | None:
    """The alert's severity, or None when the kind is switched off for this job."""
    job_sev = job_severity if job_severity in SEVERITIES else "critical"
    rule = cfg.overrides.get(job, {}).get(kind) if job else None
    if rule is None:
        rule = cfg.kind_severity.get(kind, "job")
        if rule in SEVERITIES and job and job_severity in SEVERITIES:
            if SEVERITY_RANK[rule] > SEVERITY_RANK[job_sev]:
                rule = job_sev
    if rule == "off":
        return None
    return job_sev if rule == "job" else rule
