"""Every table of market-timers.toml with its schema Table (schema/table.py), and where
market-timers.toml(5) describes it: tests/project/test_docs.py holds the man page to every declared key.

Imported only where every table is wanted (the docs test): it loads every table's module.
"""

from __future__ import annotations

from dataclasses import dataclass

from market_timers.channels import specs
from market_timers.config import (
    alerts,
    cluster,
    events,
    jobs,
    metrics,
    overrides,
    sessionrules,
    toplevel,
    watch,
)
from market_timers.schema.table import Table


@dataclass(frozen=True)
class Documented:
    name: str  # the table as written in the file: "[[job]]", "[alerts.email]"
    section: str  # the man page's .SH heading that describes it
    entry: str | None  # the .TP tag whose text names every key; None: each key has its own .TP
    table: Table


def tables() -> list[Documented]:
    return [
        Documented("(top level)", "TOP-LEVEL KEYS", None, toplevel.TOP),
        # [shared]: names of the config's own choosing, no fixed keys (config/jobidentity.py)
        Documented("[shared]", "TOP-LEVEL KEYS", "shared", Table(())),
        Documented("[[job]]", "JOBS", None, jobs.JOB),
        Documented("[job.sessions]", "JOBS", None, sessionrules.TABLE),
        Documented("[overrides.<calendar>]", "OVERRIDES", None, overrides.OVERRIDE),
        Documented("[alerts]", "ALERTS", None, alerts.TABLE),
        Documented("[alerts.routes]", "ALERTS", "routes", alerts.ROUTES),
        *(Documented(f"[alerts.{spec.name}]", "ALERTS", f"[alerts.{spec.name}]", spec.table)
          for spec in specs()),
        Documented("[watch]", "WATCH", None, watch.TABLE),
        Documented("[metrics]", "METRICS", None, metrics.TABLE),
        Documented("[events]", "EVENTS", None, events.TABLE),
        Documented("[[events.expected]]", "EVENTS", "[[events.expected]]", events.EXPECTED),
        Documented("[[events.incident]]", "EVENTS", "[[events.incident]]", events.INCIDENT),
        Documented("[[events.count]]", "EVENTS", "[[events.count]]", events.COUNT),
        Documented("[cluster]", "CLUSTER", None, cluster.TABLE),
    ]
