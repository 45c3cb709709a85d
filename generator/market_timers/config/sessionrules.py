"""`[job.sessions]`: which sessions of its calendar a job runs on (default: every one).

    [job.sessions]
    period = "month"        # week | month | quarter | year: the nth session of each period,
    from = "end"            #   counted from its end (or "start"),
    offset = 2              #   0 = the last (first) session, 2 = the third-last (third)

    [job.sessions]
    weekday = "fri"         # the nth weekday of a month (mon..sun or monday..sunday, any case):
    nth = 3                 #   1..5, or -1..-5 counted from the month's end
    months = [3, 6, 9, 12]  #   only these months (default: every month; with `period`: the
                            #   selected session's month)
    if_closed = "previous"  #   that day is not a session: the previous session, the next, or none

    early_close = "only"    # only | never: early-close days; also late_open, break (a session
                            # with a midday break), after_closure / before_closure (the first
                            # session after, the last before, a closure of three days or more)
    count_among = "all"     # with `period` and a filter: count the nth among all sessions and
                            # drop it when a filter refuses it (default), or "filtered": among
                            # the sessions the filters keep

A table has at most one date rule (`period` or `weekday`); the attribute keys filter what it
selects (or every session when it has none). The job's `extra` dates are added and its `skip`
dates removed after the rule (config/jobs.py). Checked here without the calendars; what they
select is schedule/selection.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from market_timers.schema.table import Bad, Key, Table

PERIODS = ("week", "month", "quarter", "year")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
IF_CLOSED = ("previous", "next", "none")
CHOICE = ("only", "never")
# attribute key -> what it is, as the plan and the unit's description say it
ATTRIBUTES = {"early_close": "early close", "late_open": "late open", "break": "break",
              "after_closure": "first after a closure", "before_closure": "last before a closure"}
# The most sessions a period can hold (7 days a week): a larger offset never selects anything.
MOST_SESSIONS = {"week": 7, "month": 31, "quarter": 92, "year": 366}
MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
               "Dec")
PERIOD_KEYS = ("period", "from", "offset", "count_among")
COUNT_AMONG = ("all", "filtered")
WEEKDAY_KEYS = ("weekday", "nth", "if_closed")


@dataclass(frozen=True)
class SessionRule:
    period: str | None = None  # PERIODS
    from_end: bool = True
    offset: int = 0  # sessions from the period's end (start)
    weekday: int | None = None  # 0 = Monday
    nth: int = 0  # 1..5 or -1..-5
    months: frozenset[int] = frozenset()  # empty: every month
    if_closed: str = "previous"
    attributes: tuple[tuple[str, str], ...] = ()  # (ATTRIBUTES key, "only" | "never")
    count_among: str = "all"  # COUNT_AMONG: the period's nth of all sessions or the filtered


def _period(value: Any) -> str:
    if value not in PERIODS:
        raise Bad(f"one of {', '.join(PERIODS)}")
    return value


def _from(value: Any) -> bool:
    if value not in ("start", "end"):
        raise Bad('"start" (count from the period\'s first session) or "end" (from its last)')
    return value == "end"


def _offset(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 365:
        raise Bad("a whole number of sessions from 0 to 365: 0 is the period's last (with "
                  'from = "start": first) session, 1 the one before (after) it')
    return value


def _weekday(value: Any) -> int:
    # one rule, no guessing: a day's three-letter form or full name ("thurs", "fr" are refused)
    spelled = value.lower() if isinstance(value, str) else None
    for i, (short, full) in enumerate(zip(WEEKDAYS, WEEKDAY_NAMES, strict=True)):
        if spelled in (short, full):
            return i
    raise Bad(f"a day's three-letter form or full English name, in any case: "
              f"{', '.join(WEEKDAYS)} or monday ... sunday (\"fri\", \"Fri\", \"FRIDAY\")")


def _nth(value: Any) -> int:
    if (isinstance(value, bool) or not isinstance(value, int) or value == 0
            or not -5 <= value <= 5):
        raise Bad("required with `weekday`: 1 to 5 (the first to fifth of the month), or -1 to "
                  "-5 counted from the month's end (-1: the last)")
    return value


def _months(value: Any) -> frozenset[int]:
    if not isinstance(value, list) or not value:
        raise Bad("a non-empty array of month numbers 1 to 12, such as [3, 6, 9, 12]")
    bad = [Bad("a month number 1 to 12", at=f"[{i}]", shown=m) for i, m in enumerate(value)
           if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 12]
    if bad:
        raise Bad.each(bad)
    return frozenset(value)


def _if_closed(value: Any) -> str:
    if value not in IF_CLOSED:
        raise Bad("what to do when that day is not a session: previous (the session before "
                  "it), next (the one after) or none (no run that month)")
    return value


def _choice(value: Any) -> str:
    if value not in CHOICE:
        raise Bad('"only" (run on such sessions only) or "never" (never on them)')
    return value


def _count_among(value: Any) -> str:
    if value not in COUNT_AMONG:
        raise Bad('"all" (the period\'s nth session, dropped when a filter refuses it) or '
                  '"filtered" (the nth of the sessions the filters keep)')
    return value


TABLE = Table((
    Key("period", _period, None, "the nth session of each week, month, quarter or year"),
    Key("from", _from, True, 'count from the period\'s "end" (default) or "start"', attr="from_end"),
    Key("offset", _offset, 0, "sessions from that end: 0 the last (first) session"),
    Key("weekday", _weekday, None, "the nth weekday of each month: mon ... sun or monday ... "
        "sunday, in any case"),
    Key("nth", _nth, 0, "with weekday: 1 to 5, or -1 to -5 from the month's end"),
    Key("months", _months, frozenset(), "only in these months (1 to 12)"),
    Key("if_closed", _if_closed, "previous", "with weekday, when that day is not a session: "
        "previous, next or none"),
    *(Key(key, _choice, None, f"{label}: only or never") for key, label in ATTRIBUTES.items()),
    Key("count_among", _count_among, "all", "with period and a filter: all (default) or "
        "filtered"),
), not_table="must be a table ([job.sessions] after the job's [[job]])")
KEYS = TABLE.names


def parse_sessions(t: dict, path: str, problems) -> SessionRule | None:
    """The job's `sessions` table, or None without one (or after adding its problems)."""
    if "sessions" not in t:
        return None
    where = f"{path}.sessions"
    raw = t["sessions"]
    before = len(problems.items)
    values = TABLE.parse(raw, where, problems)
    if values is None:
        return None
    if "period" in raw and "weekday" in raw:
        problems.add(f"{where}.weekday", f"a rule is either the nth session of a period "
                     f"({where}.period) or the nth weekday of a month ({where}.weekday), "
                     "not both: keep one (two jobs for both)", raw["weekday"])
    for keys, rule in ((PERIOD_KEYS, "period"), (WEEKDAY_KEYS, "weekday")):
        for key in keys:
            if key in raw and rule not in raw:
                problems.add(f"{where}.{key}", f"only with `{rule}` (set {where}.{rule}, or "
                             "remove this key)", raw[key])
    period, offset = values["period"], values["offset"]
    if period is not None and offset >= MOST_SESSIONS[period]:
        problems.add(f"{where}.offset", f"a {period} has fewer than {MOST_SESSIONS[period]} "
                     "sessions: this offset would never select one", raw.get("offset"))
    if "count_among" in raw and not any(values[key] for key in ATTRIBUTES):
        problems.add(f"{where}.count_among", "only with an attribute filter to count among ("
                     f"{', '.join(ATTRIBUTES)}): add one, or remove this key", raw["count_among"])
    if "weekday" in raw and "nth" not in raw:
        problems.add(f"{where}.nth", "required with `weekday`: which one of the month, 1 to 5 "
                     "or -1 (the last) to -5")
    if len(problems.items) != before:
        return None
    return SessionRule(
        period=values["period"], from_end=values["from_end"], offset=values["offset"],
        weekday=values["weekday"], nth=values["nth"], months=values["months"],
        if_closed=values["if_closed"], count_among=values["count_among"],
        attributes=tuple((key, values[key]) for key in ATTRIBUTES if values[key] is not None))


def _ordinal(n: int) -> str:
    if n < 0:
        return "last" if n == -1 else f"{_ordinal(-n)}-last"
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def months_text(months: frozenset[int]) -> str:
    return ", ".join(MONTH_NAMES[m - 1] for m in sorted(months))


def date_rule_text(rule: SessionRule) -> str:
    """"month end -2", "quarter start", "3rd fri of Mar, Jun, Sep, Dec" ("" without one)."""
    if rule.period is not None:
        text = f"{rule.period} {'end' if rule.from_end else 'start'}"
        if rule.offset:
            text += f" {'-' if rule.from_end else '+'}{rule.offset}"
        if rule.months:
            text += f" in {months_text(rule.months)}"
        return text
    if rule.weekday is not None:
        of = months_text(rule.months) if rule.months else "the month"
        return f"{_ordinal(rule.nth)} {WEEKDAYS[rule.weekday]} of {of}"
    return ""


NEVER = {"early_close": "no early close", "late_open": "no late open", "break": "no break",
         "after_closure": "not first after a closure",
         "before_closure": "not last before a closure"}


def attribute_text(key: str, choice: str) -> str:
    """"early close only", "no early close"."""
    return f"{ATTRIBUTES[key]} only" if choice == "only" else NEVER[key]


def describe(rule: SessionRule) -> str:
    """The whole rule in a few words: the plan, the warnings and the man page say it so."""
    if rule.count_among == "filtered":
        return counted_text(rule)
    parts = [date_rule_text(rule)] if date_rule_text(rule) else []
    if rule.months and rule.period is None and rule.weekday is None:
        parts.append(f"in {months_text(rule.months)}")
    parts += [attribute_text(k, c) for k, c in rule.attributes]
    return ", ".join(parts) or "every session"


def counted_text(rule: SessionRule) -> str:
    """"month end (counted among: no early close)": a rule with count_among = "filtered"."""
    said = ", ".join(attribute_text(k, c) for k, c in rule.attributes)
    return f"{date_rule_text(rule)} (counted among: {said})"
