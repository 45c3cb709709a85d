"""Fit an alert's text into a channel's size limit, in the units the channel counts.

Telegram counts a message's length in UTF-16 code units (an emoji outside the BMP counts 2) and
refuses more than 4096; Slack advises under 4,000. The head (subject, text, context) comes first;
the journal excerpt keeps its *end* (the error is at the bottom) and as much of it as fits. When the
head alone is too long, it is cut and marked with "…". Binary searches over the string: bounded
work for any input, no loop that depends on the text shrinking.
"""

from __future__ import annotations

from collections.abc import Callable

ELLIPSIS = "…"
JOURNAL_LABEL = "\n\nlast journal lines:\n"
MIN_EXCERPT = 1  # units of journal worth sending after the label


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _longest(n: int, fits: Callable[[int], bool]) -> int:
    """The largest k in [0, n] with fits(k), fits being monotone (true, then false)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefix(text: str, room: int, measure: Callable[[str], int] = len) -> str:
    """The longest prefix of `text` measuring at most `room`."""
    if room <= 0:
        return ""
    return text[:_longest(len(text), lambda k: measure(text[:k]) <= room)]


def suffix(text: str, room: int, measure: Callable[[str], int] = len) -> str:
    """The longest suffix of `text` measuring at most `room`."""
    if room <= 0:
        return ""
    k = _longest(len(text), lambda k: measure(text[len(text) - k:]) <= room)
    return text[len(text) - k:]


def cut(text: str, limit: int, measure: Callable[[str], int] = len) -> str:
    """`text` if it fits, else its longest prefix that fits with a trailing "…"."""
    if measure(text) <= limit:
        return text
    return prefix(text, limit - measure(ELLIPSIS), measure) + ELLIPSIS if limit >= measure(
        ELLIPSIS) else prefix(text, limit, measure)


def fit_parts(head: str, journal: str, limit: int | None,
              measure: Callable[[str], int] = len) -> str:
    full = head + (JOURNAL_LABEL + journal if journal else "")
    if limit is None or measure(full) <= limit:
        return full
    if journal:
        room = limit - measure(head) - measure(JOURNAL_LABEL) - measure(ELLIPSIS)
        if room >= MIN_EXCERPT:
            kept = suffix(journal, room, measure)
            if kept:
                return head + JOURNAL_LABEL + ELLIPSIS + kept
    return cut(head, limit, measure)
