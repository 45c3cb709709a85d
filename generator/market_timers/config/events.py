"""The `[events]` table: how the trading system's events become alerts, incidents or digest lines.

    [events]
    default_severity = "warning"   # kinds no rule names: critical | warning | info | digest | off
    severity = { rejected = "critical", cancelled = "digest" }   # per kind, same values

    [[events.expected]]            # scheduled is not news
    kind = "disconnected"
    after_job = "disconnect"       # within `within` after that job's run (or sent by that job)
    within = "10min"

    [[events.incident]]            # an outage is one incident
    name = "connection"
    open = ["heartbeat_lost", "disconnected"]
    close = ["reconnected"]
    interrupt_after = "60s"        # resolved sooner: digest only; else alert when it passes
    severity = "warning"

    [[events.count]]               # many small warnings are one useful alert
    kind = "slippage_high"
    threshold = 20                 # per session
    severity = "warning"
    worst = "max"                  # which --value is the worst: max | min

Every problem is reported with its key path (`events.incident[0].interrupt_after`), like the rest
of the config. Without an `[events]` table every event alerts at `warning` (the naive rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from market_timers.contracts.severities import SEVERITIES
from market_timers.schema.durations import parse_duration
from market_timers.schema.problems import Problems

KIND = re.compile(r"^[a-z][a-z0-9_.-]{0,39}$")
RULE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
ROUTINGS = (*SEVERITIES, "digest", "off")
KIND_HELP = "an event kind is [a-z][a-z0-9_.-]*, at most 40 characters"

DAY = 24 * 3600
_TOP = {"default_severity", "severity", "expected", "incident", "count"}
_EXPECTED = {"kind", "after_job", "within"}
_INCIDENT = {"name", "open", "close", "interrupt_after", "severity", "recovery"}
_COUNT = {"kind", "threshold", "severity", "worst"}


@dataclass(frozen=True)
class Expected:
    kind: str
    after_job: str
    within: int  # seconds


@dataclass(frozen=True)
class IncidentRule:
    name: str
    open: tuple[str, ...]
    close: tuple[str, ...]
    interrupt_after: int = 0  # seconds; 0 = alert as soon as it opens
    severity: str = "warning"
    recovery: bool = True  # announce the resolution of an incident whose alert was sent


@dataclass(frozen=True)
class CountRule:
    kind: str
    threshold: int
    severity: str = "warning"
    worst: str = "max"


@dataclass
class EventsConfig:
    default_severity: str = "warning"
    severity: dict[str, str] = field(default_factory=dict)
    expected: list[Expected] = field(default_factory=list)
    incidents: list[IncidentRule] = field(default_factory=list)
    counts: list[CountRule] = field(default_factory=list)

    def incident_for(self, kind: str) -> IncidentRule | None:
        return next((r for r in self.incidents if kind in r.open or kind in r.close), None)

    def count_for(self, kind: str) -> CountRule | None:
        return next((r for r in self.counts if r.kind == kind), None)


def _unknown(table: dict, known: set[str], path: str, problems: Problems) -> None:
    for key in sorted(set(table) - known):
        problems.add(f"{path}.{key}", f"unknown key (known: {', '.join(sorted(known))})")


def _kind(value: object, path: str, problems: Problems) -> str | None:
    if isinstance(value, str) and KIND.match(value):
        return value
    problems.add(path, f"required; {KIND_HELP}", value)
    return None


def _kinds(value: object, path: str, problems: Problems) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        problems.add(path, "must be a non-empty array of event kinds", value)
        return ()
    return tuple(k for i, v in enumerate(value) if (k := _kind(v, f"{path}[{i}]", problems)))


def _duration(table: dict, key: str, path: str, problems: Problems, default: int,
              zero: bool = False) -> int:
    """A duration of at most a day; "0s" only where `zero` (interrupt_after: alert at once)."""
    if key not in table:
        return default
    value = table[key]
    if zero and isinstance(value, str) and value.strip() in ("0s", "0min", "0h"):
        return 0
    try:
        return parse_duration(value, DAY)
    except ValueError as e:
        problems.add(f"{path}.{key}", str(e), value)
        return default


def _choice(table: dict, key: str, path: str, problems: Problems, allowed, default: str) -> str:
    value = table.get(key, default)
    if value not in allowed:
        problems.add(f"{path}.{key}", f"must be one of {', '.join(allowed)}", value)
        return default
    return value


def _tables(raw: dict, key: str, problems: Problems) -> list[tuple[str, dict]]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        problems.add(f"events.{key}", f"must be an array of tables ([[events.{key}]])", value)
        return []
    return [(f"events.{key}[{i}]", t) for i, t in enumerate(value)]


def parse_events(raw: object, problems: Problems, job_names: set[str] | None = None
                 ) -> EventsConfig:
    """Validate `[events]`; `job_names` (the config's jobs) checks `after_job`."""
    cfg = EventsConfig()
    if raw is None:
        return cfg
    if not isinstance(raw, dict):
        problems.add("events", "must be a table", raw)
        return cfg
    _unknown(raw, _TOP, "events", problems)
    cfg.default_severity = _choice(raw, "default_severity", "events", problems, ROUTINGS,
                                   cfg.default_severity)
    _severity_table(raw, cfg, problems)
    _expected(raw, cfg, job_names, problems)
    owner: dict[str, str] = {}  # kind -> the path of the rule that handles it
    _incidents(raw, cfg, owner, problems)
    _counts(raw, cfg, owner, problems)
    for kind in cfg.severity:
        if kind in owner:
            problems.add(f"events.severity.{kind}", f"this kind is handled by {owner[kind]}; "
                         "set the severity there", cfg.severity[kind])
    return cfg


def _severity_table(raw: dict, cfg: EventsConfig, problems: Problems) -> None:
    """`[events.severity]`: kind -> severity (or digest, off)."""
    table = raw.get("severity", {})
    if not isinstance(table, dict):
        problems.add("events.severity", "must be a table of kind = severity", table)
        table = {}
    for kind, value in table.items():
        path = f"events.severity.{kind}"
        if _kind(kind, path, problems) and value not in ROUTINGS:
            problems.add(path, f"must be one of {', '.join(ROUTINGS)}", value)
        elif KIND.match(kind):
            cfg.severity[kind] = value


def _expected(raw: dict, cfg: EventsConfig, job_names: set[str] | None,
              problems: Problems) -> None:
    """`[[events.expected]]`: a kind that a job's run makes expected for a while."""
    for path, t in _tables(raw, "expected", problems):
        _unknown(t, _EXPECTED, path, problems)
        kind = _kind(t.get("kind"), f"{path}.kind", problems)
        job = t.get("after_job")
        if not isinstance(job, str) or not job:
            problems.add(f"{path}.after_job", "required; the name of the job whose run makes "
                         "this event expected (e.g. the end-of-session disconnect)", job)
            job = None
        elif job_names is not None and job not in job_names:
            problems.add(f"{path}.after_job", "no [[job]] has this name (known: "
                         f"{', '.join(sorted(job_names)) or 'none'})", job)
            job = None
        within = _duration(t, "within", path, problems, 600)
        if kind and job and within:
            cfg.expected.append(Expected(kind, job, within))


def _incidents(raw: dict, cfg: EventsConfig, owner: dict[str, str], problems: Problems) -> None:
    """`[[events.incident]]`: kinds that open and close an incident; each kind has one owner."""
    names: set[str] = set()
    for path, t in _tables(raw, "incident", problems):
        _unknown(t, _INCIDENT, path, problems)
        name = t.get("name")
        if not isinstance(name, str) or not RULE_NAME.match(name):
            problems.add(f"{path}.name", "required; [a-z][a-z0-9_-]*, at most 40 characters",
                         name)
            name = None
        elif name in names:
            problems.add(f"{path}.name", "duplicate incident rule name", name)
        opens = _kinds(t.get("open"), f"{path}.open", problems)
        closes = _kinds(t.get("close"), f"{path}.close", problems)
        for kind in set(opens) & set(closes):
            problems.add(f"{path}.close", "a kind cannot both open and close an incident", kind)
        for kind in (*opens, *closes):
            if kind in owner and owner[kind] != path:
                problems.add(path, f"kind {kind!r} is already handled by {owner[kind]}: an "
                             "event belongs to one incident rule", kind)
            owner.setdefault(kind, path)
        after = _duration(t, "interrupt_after", path, problems, 0, zero=True)
        severity = _choice(t, "severity", path, problems, SEVERITIES, "warning")
        recovery = t.get("recovery", True)
        if not isinstance(recovery, bool):
            problems.add(f"{path}.recovery", "must be true or false", recovery)
            recovery = True
        if name and opens and closes:
            names.add(name)
            cfg.incidents.append(IncidentRule(name, opens, closes, after, severity, recovery))


def _counts(raw: dict, cfg: EventsConfig, owner: dict[str, str], problems: Problems) -> None:
    """`[[events.count]]`: a kind counted per session, one alert past its threshold."""
    for path, t in _tables(raw, "count", problems):
        _unknown(t, _COUNT, path, problems)
        kind = _kind(t.get("kind"), f"{path}.kind", problems)
        if kind in owner:
            problems.add(f"{path}.kind", f"already handled by {owner[kind]}", kind)
            kind = None
        elif kind:
            owner[kind] = path
        threshold = t.get("threshold")
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            problems.add(f"{path}.threshold", "required; a whole number >= 1 (events of this "
                         "kind in one session before one alert is sent)", threshold)
            threshold = None
        severity = _choice(t, "severity", path, problems, SEVERITIES, "warning")
        worst = _choice(t, "worst", path, problems, ("max", "min"), "max")
        if kind and threshold:
            cfg.counts.append(CountRule(kind, threshold, severity, worst))


def events_of_config(raw: dict, problems: Problems) -> EventsConfig:
    """config.parse's one call: the `[events]` table checked against the config's job names."""
    jobs = raw.get("job", [])
    names = {t.get("name") for t in jobs if isinstance(t, dict)} if isinstance(jobs, list) \
        else set()
    return parse_events(raw.get("events"), problems, {n for n in names if isinstance(n, str)})
