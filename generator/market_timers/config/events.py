"""The `[events]` table: how the trading system's events become alerts, incidents or digest lines.

Its keys (default_severity, severity, flood_limit, flood_window and the [[events.expected]],
[[events.incident]] and [[events.count]] rules) are told in market-timers.toml(5), EVENTS.
Every problem is reported with its key path (`events.incident[0].interrupt_after`), like the rest
of the config. Without an `[events]` table every event alerts at `warning` (the naive rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from market_timers.config.jobchecks import USER_NAME
from market_timers.contracts.severities import SEVERITIES
from market_timers.schema.durations import parse_duration
from market_timers.schema.problems import Problems
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import flag, one_of

KIND = re.compile(r"[a-z][a-z0-9_.-]{0,39}\Z")  # \Z: "$" would let a trailing newline in
RULE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")
ROUTINGS = (*SEVERITIES, "digest", "off")
KIND_HELP = "an event kind is [a-z][a-z0-9_.-]*, at most 40 characters"

DAY = 24 * 3600


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
    writers: tuple[str, ...] = ()  # users who may open and close it (events/intake.py); (): any


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
    writers: tuple[str, ...] = ()  # who may spool any event (events/intake.py); (): anyone
    flood_limit: int = 20  # messages per source, severity and window (events/flood.py)
    flood_window: int = 300  # seconds

    def incident_for(self, kind: str) -> IncidentRule | None:
        return next((r for r in self.incidents if kind in r.open or kind in r.close), None)

    def count_for(self, kind: str) -> CountRule | None:
        return next((r for r in self.counts if r.kind == kind), None)


def _kind(value: object) -> str:
    if isinstance(value, str) and KIND.match(value):
        return value
    raise Bad(f"required; {KIND_HELP}")


def _kinds(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise Bad("must be a non-empty array of event kinds")
    bad = [Bad(f"required; {KIND_HELP}", at=f"[{i}]", shown=v) for i, v in enumerate(value)
           if not (isinstance(v, str) and KIND.match(v))]
    if bad:
        raise Bad.each(bad)
    return tuple(value)


def _duration(value: object) -> int:
    """A duration of at most a day."""
    return parse_duration(value, DAY)


def _duration_or_zero(value: object) -> int:
    """A duration of at most a day, or "0s" (interrupt_after: alert at once)."""
    if isinstance(value, str) and value.strip() in ("0s", "0min", "0h"):
        return 0
    return parse_duration(value, DAY)


def _choice(allowed):
    return one_of(allowed, f"must be one of {', '.join(allowed)}")


def _after_job(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise Bad("required; the name of the job whose run makes this event expected (e.g. the "
                  "end-of-session disconnect)")
    return value


def _rule_name(value: object) -> str:
    if not isinstance(value, str) or not RULE_NAME.match(value):
        raise Bad("required; [a-z][a-z0-9_-]*, at most 40 characters")
    return value


def _writers(value: object) -> tuple[str, ...]:
    """User names: the owner of a spooled file is its writer (the spool is sticky)."""
    if not isinstance(value, list):
        raise Bad("must be an array of user names")
    bad = [Bad("must be a user name: a letter or _, then letters, digits, _ or - (at most 31 "
               "characters)", at=f"[{i}]", shown=v) for i, v in enumerate(value)
           if not (isinstance(v, str) and USER_NAME.match(v))]
    if bad:
        raise Bad.each(bad)
    return tuple(value)


def _flood_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise Bad("must be a whole number >= 1 (at most 100000): the messages one source's "
                  "events send per severity and flood_window; the rest go to the digest")
    return value


def _threshold(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Bad("required; a whole number >= 1 (events of this kind in one session before one "
                  "alert is sent)")
    return value


TABLE = Table((
    Key("default_severity", _choice(ROUTINGS), "warning",
        "what a kind no rule names becomes: critical, warning, info, digest or off"),
    Key("severity", None, {}, "per kind, the same values (a table kind = severity)"),
    Key("expected", None, [], "[[events.expected]]: a kind a job's run makes expected"),
    Key("incident", None, [], "[[events.incident]]: kinds that open and close an incident"),
    Key("count", None, [], "[[events.count]]: a kind counted per session"),
    Key("writers", _writers, (), "the users who may spool events (default: whoever may)"),
    Key("flood_limit", _flood_limit, 20,
        "messages per source, severity and flood_window (default 20)"),
    Key("flood_window", _duration, 300, "the window of flood_limit (default 5min)"),
))
EXPECTED = Table((
    Key("kind", _kind, None, "the event kind", required=True),
    Key("after_job", _after_job, None, "the job whose run makes it expected", required=True),
    Key("within", _duration, 600, "how long after that job's run (default 10min)"),
))
INCIDENT = Table((
    Key("name", _rule_name, None, "the rule's name", required=True),
    Key("open", _kinds, (), "the kinds that open an incident", required=True),
    Key("close", _kinds, (), "the kinds that resolve it", required=True),
    Key("interrupt_after", _duration_or_zero, 0,
        "resolved sooner: digest only; else alert when it passes (default 0s)"),
    Key("severity", _choice(SEVERITIES), "warning", "the alert's severity"),
    Key("recovery", flag, True, "announce the resolution of an incident whose alert was sent"),
    Key("writers", _writers, (), "the users who may open and close its incidents (default: "
        "whoever may spool)"),
))
COUNT = Table((
    Key("kind", _kind, None, "the event kind", required=True),
    Key("threshold", _threshold, None, "events per session before one alert", required=True),
    Key("severity", _choice(SEVERITIES), "warning", "the alert's severity"),
    Key("worst", _choice(("max", "min")), "max", "which --value is the worst: max or min"),
))


def _tables(value: object, key: str, problems: Problems) -> list[tuple[str, dict]]:
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
    top = TABLE.parse(raw, "events", problems)
    if top is None:
        return cfg
    cfg.default_severity = top["default_severity"]
    cfg.writers = top["writers"]
    cfg.flood_limit, cfg.flood_window = top["flood_limit"], top["flood_window"]
    _severity_table(top["severity"], cfg, problems)
    _expected(top["expected"], cfg, job_names, problems)
    owner: dict[str, str] = {}  # kind -> the path of the rule that handles it
    _incidents(top["incident"], cfg, owner, problems)
    _counts(top["count"], cfg, owner, problems)
    for kind in cfg.severity:
        if kind in owner:
            problems.add(f"events.severity.{kind}", f"this kind is handled by {owner[kind]}; "
                         "set the severity there", cfg.severity[kind])
    return cfg


def _severity_table(table: object, cfg: EventsConfig, problems: Problems) -> None:
    """`[events.severity]`: kind -> severity (or digest, off)."""
    if not isinstance(table, dict):
        problems.add("events.severity", "must be a table of kind = severity", table)
        table = {}
    for kind, value in table.items():
        path = f"events.severity.{kind}"
        if not KIND.match(kind):
            problems.add(path, f"required; {KIND_HELP}", kind)
        elif value not in ROUTINGS:
            problems.add(path, f"must be one of {', '.join(ROUTINGS)}", value)
        else:
            cfg.severity[kind] = value


def _expected(tables: object, cfg: EventsConfig, job_names: set[str] | None,
              problems: Problems) -> None:
    """`[[events.expected]]`: a kind that a job's run makes expected for a while."""
    for path, t in _tables(tables, "expected", problems):
        rule = EXPECTED.parse(t, path, problems)
        job = rule["after_job"]
        if job is not None and job_names is not None and job not in job_names:
            problems.add(f"{path}.after_job", "no [[job]] has this name (known: "
                         f"{', '.join(sorted(job_names)) or 'none'})", job)
            job = None
        if rule["kind"] and job and rule["within"]:
            cfg.expected.append(Expected(rule["kind"], job, rule["within"]))


def _incidents(tables: object, cfg: EventsConfig, owner: dict[str, str],
               problems: Problems) -> None:
    """`[[events.incident]]`: kinds that open and close an incident; each kind has one owner."""
    names: set[str] = set()
    for path, t in _tables(tables, "incident", problems):
        rule = INCIDENT.parse(t, path, problems)
        name, opens, closes = rule["name"], rule["open"], rule["close"]
        if name is not None and name in names:
            problems.add(f"{path}.name", "duplicate incident rule name", name)
        for kind in set(opens) & set(closes):
            problems.add(f"{path}.close", "a kind cannot both open and close an incident", kind)
        for kind in (*opens, *closes):
            if kind in owner and owner[kind] != path:
                problems.add(path, f"kind {kind!r} is already handled by {owner[kind]}: an "
                             "event belongs to one incident rule", kind)
            owner.setdefault(kind, path)
        if name and opens and closes:
            names.add(name)
            cfg.incidents.append(IncidentRule(name, opens, closes, rule["interrupt_after"],
                                              rule["severity"], rule["recovery"],
                                              rule["writers"]))


def _counts(tables: object, cfg: EventsConfig, owner: dict[str, str], problems: Problems) -> None:
    """`[[events.count]]`: a kind counted per session, one alert past its threshold."""
    for path, t in _tables(tables, "count", problems):
        rule = COUNT.parse(t, path, problems)
        kind = rule["kind"]
        if kind in owner:
            problems.add(f"{path}.kind", f"already handled by {owner[kind]}", kind)
            kind = None
        elif kind:
            owner[kind] = path
        if kind and rule["threshold"]:
            cfg.counts.append(CountRule(kind, rule["threshold"], rule["severity"], rule["worst"]))


def events_of_config(raw: dict, problems: Problems) -> EventsConfig:
    """config.parse's one call: the `[events]` table checked against the config's job names."""
    jobs = raw.get("job", [])
    names = {t.get("name") for t in jobs if isinstance(t, dict)} if isinstance(jobs, list) \
        else set()
    return parse_events(raw.get("events"), problems, {n for n in names if isinstance(n, str)})
