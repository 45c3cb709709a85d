"""A session rule (config/sessionrules.py) applied to a view of sessions: the days its date rule
chooses (the nth session of a period, the nth weekday of a month) and its attribute filters keep,
each with why ("month end -2"). selection.py builds the view and asks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from datetime import date, timedelta

from market_timers.config.sessionrules import (
    SessionRule,
    attribute_text,
    counted_text,
    date_rule_text,
    describe,
)
from market_timers.schedule import weeks

LONG_CLOSURE = timedelta(days=4)  # between two sessions' labels: closed three days or more


@dataclass
class SessionView:
    """The sessions a rule is judged on (one calendar's, or the days several trade), with what
    the attribute filters ask of each."""

    labels: list[date]
    breaks: list[bool]  # the session has a midday break
    covered: tuple[date, date]  # the days the calendars' data covers
    weekmasks: object  # () -> (regular weekmask, special weekmasks) (a "week" rule asks)
    special: object  # () -> (early-close days, late-open days), built when a filter asks


def period_bounds(period: str, day: date) -> tuple[date, date]:
    """First and last day of the period holding `day`. A week here is Monday to Sunday, near
    enough for selection's window (its MARGIN covers any trading week); a rule's weeks are
    _weeks'."""
    if period == "week":
        first = day - timedelta(days=day.weekday())
        return first, first + timedelta(days=6)
    if period == "year":
        return date(day.year, 1, 1), date(day.year, 12, 31)
    months = 3 if period == "quarter" else 1
    m0 = (day.month - 1) // months * months + 1
    first = date(day.year, m0, 1)
    nxt = date(day.year + (m0 + months > 12), (m0 + months - 1) % 12 + 1, 1)
    return first, nxt - timedelta(days=1)


def date_rule_days(rule: SessionRule, view: SessionView) -> dict[date, str]:
    if rule.period is not None:
        return _nth_of_period(rule, view)
    if rule.weekday is not None:
        return _nth_weekday(rule, view.labels, view.covered)
    why = describe(rule)
    return {d: why for d in view.labels if not rule.months or d.month in rule.months}


def _nth_of_period(rule: SessionRule, view: SessionView) -> dict[date, str]:
    covered = view.covered
    if rule.period == "week":
        groups = _weeks(view)
    else:
        groups = {}
        for d in view.labels:
            groups.setdefault(period_bounds(rule.period, d), []).append(d)
    why = date_rule_text(rule)
    out = {}
    for (first, last), days in groups.items():
        if first < covered[0] or last > covered[1] or rule.offset >= len(days):
            continue  # a period the data does not wholly cover is unknown
        day = days[-1 - rule.offset] if rule.from_end else days[rule.offset]
        if not rule.months or day.month in rule.months:
            out[day] = why
    return out


def _weeks(view: SessionView) -> dict[tuple[date, date], list[date]]:
    """The view's sessions by trading week (first and last day of each). A session whose week's
    start or end is not known (beyond the view's days) is left out."""
    if not view.labels:
        return {}
    regular, specials = view.weekmasks()
    # a week is at most a few days longer than seven (at a change of trading week): a fortnight
    # either side finds the start and the end of the first and the last session's weeks
    starts = weeks.week_starts(regular, specials, view.labels[0] - timedelta(days=14),
                               view.labels[-1] + timedelta(days=15))
    groups: dict[tuple[date, date], list[date]] = {}
    for d in view.labels:
        i = bisect.bisect_right(starts, d)
        if 0 < i < len(starts):
            groups.setdefault((starts[i - 1], starts[i] - timedelta(days=1)), []).append(d)
    return groups


def nth_weekday(year: int, month: int, weekday: int, nth: int) -> date | None:
    """The nth (1..5; -1..-5 from the end) weekday of a month, or None when it has fewer."""
    first = date(year, month, 1)
    last = period_bounds("month", first)[1]
    if nth > 0:
        day = first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (nth - 1))
    else:
        day = last - timedelta(days=(last.weekday() - weekday) % 7 + 7 * (-nth - 1))
    return day if first <= day <= last else None


def _nth_weekday(rule: SessionRule, labels: list[date], covered: tuple[date, date]
                 ) -> dict[date, str]:
    sessions = set(labels)
    text = date_rule_text(rule)
    out: dict[date, str] = {}
    y, m = labels[0].year if labels else covered[0].year, labels[0].month if labels else 1
    stop = (covered[1].year, covered[1].month)
    while (y, m) <= stop:
        day = nth_weekday(y, m, rule.weekday, rule.nth)
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
        if day is None or (rule.months and day.month not in rule.months):
            continue
        if not covered[0] <= day <= covered[1]:
            continue
        if day in sessions:
            out[day] = text
            continue
        if rule.if_closed == "none":
            continue
        i = bisect.bisect_left(labels, day)
        moved = labels[i - 1] if rule.if_closed == "previous" and i > 0 else \
            labels[i] if rule.if_closed == "next" and i < len(labels) else None
        if moved is not None and covered[0] <= moved <= covered[1]:
            out.setdefault(moved, f"{text} ({day} closed: {rule.if_closed} session)")
    return out


def attribute_days(rule: SessionRule, picks: dict[date, str], view: SessionView) -> dict[date, str]:
    """The picks that pass every attribute filter of the rule, the holding ones said in why."""
    if not rule.attributes:
        return picks
    labels, breaks = view.labels, view.breaks
    index = {d: i for i, d in enumerate(labels)}
    early = late = frozenset()
    if any(k in ("early_close", "late_open") for k, _ in rule.attributes):
        early, late = view.special()

    def has(key: str, day: date) -> bool:
        i = index[day]
        if key == "early_close":
            return day in early
        if key == "late_open":
            return day in late
        if key == "break":
            return breaks[i]
        if key == "after_closure":
            return i > 0 and day - labels[i - 1] >= LONG_CLOSURE
        return i + 1 < len(labels) and labels[i + 1] - day >= LONG_CLOSURE  # before_closure

    out = {}
    for day, why in picks.items():
        if all(has(key, day) == (choice == "only") for key, choice in rule.attributes):
            said = [attribute_text(k, c) for k, c in rule.attributes if c == "only"]
            if rule.period is None and rule.weekday is None:
                out[day] = describe(rule)
            else:
                out[day] = ", ".join([why, *said])
    return out


def counted_among_filtered(rule: SessionRule, view: SessionView) -> dict[date, str]:
    """count_among = "filtered": the period's nth of the sessions every filter keeps (November
    2025's last XNYS session without an early close: 11-26, not the half day 11-28)."""
    kept = set(attribute_days(rule, dict.fromkeys(view.labels, ""), view))
    index = [i for i, d in enumerate(view.labels) if d in kept]
    filtered = replace(view, labels=[view.labels[i] for i in index],
                       breaks=[view.breaks[i] for i in index])
    return dict.fromkeys(date_rule_days(rule, filtered), counted_text(rule))
