"""An exchange's trading weeks (`period = "week"`), by the weekmask in force on each date.

A weekmask ("1111100": Monday to Sunday, 1 = a trading weekday) is exchange_calendars' regular
`weekmask` or, for the dates one covers, one of its `special_weekmasks` (TASE: "1111001",
Sunday to Thursday, until 2026-01-04). A week starts on the weekday after the weekmask's weekend
(Monday for Monday-Friday, Sunday for Sunday-Thursday). A week starts on day x when x is that
weekday by the weekmask in force on x, and the day before it is not a trading weekday or is
the last day of a week, by the weekmask in force on that day. So when the trading week moves
later (TASE: Sunday-Thursday, then Monday-Friday from 2026-01-05) the week that holds the change
runs from the old start to the new end (Sunday 2026-01-04 to Friday 2026-01-09), and when it
moves earlier a week ends at the old weekend.
"""

from __future__ import annotations

from datetime import date, timedelta
from functools import lru_cache

REGULAR = "1111100"
Specials = tuple[tuple[date | None, date | None, str], ...]  # (first, last, weekmask), inclusive


def weekmask_on(day: date, regular: str, specials: Specials) -> str:
    for first, last, mask in specials:
        if (first is None or first <= day) and (last is None or day <= last):
            return mask
    return regular


@lru_cache(maxsize=64)
def first_weekday(mask: str, regular: str = REGULAR) -> int:
    """The weekday (0 = Monday) a week of `mask` starts on: the one after its longest run of
    days without trading. A weekmask of one such day or none is a week of make-up sessions (a
    traded Saturday or Sunday): its weeks are those of the regular weekmask (Monday for one of
    seven trading days)."""
    best_len, best_start = 0, 0
    for start in range(7):
        if mask[start] == "1" or mask[start - 1] == "0":
            continue  # not the first day of a run of days off
        length = next((n for n in range(7) if mask[(start + n) % 7] == "1"), 7)
        if length > best_len:
            best_len, best_start = length, (start + length) % 7
    if best_len >= 2:
        return best_start
    return first_weekday(regular) if mask != regular else 0


def week_starts(regular: str, specials: Specials, start: date, end: date) -> list[date]:
    """Every day in start..end on which a week starts."""
    out = []
    day = start
    before = start - timedelta(days=1)
    prev_mask = weekmask_on(before, regular, specials)
    while day <= end:
        mask = weekmask_on(day, regular, specials)
        ends_week = (prev_mask[before.weekday()] == "0"
                     or before.weekday() == (first_weekday(prev_mask, regular) - 1) % 7)
        if day.weekday() == first_weekday(mask, regular) and ends_week:
            out.append(day)
        before, prev_mask, day = day, mask, day + timedelta(days=1)
    return out
