"""Offsets and durations as written in the config: "-15min", "+30min", "90s", "1h30min".

Hand-written on purpose: the accepted grammar is deliberately small (units s, min or m, h,
optional sign), so that a typo such as "15" (which unit?) is an error that names the key, rather
than something a general parser (pandas.Timedelta, systemd.time) would silently read its own way.
"m" is minutes, as in systemd.time(7), where months are "M" and milliseconds "ms": both are
refused here with that reason (no duration of a day's schedule is counted in either), so that
"15m" can mean nothing else.

Every value is bounded: an offset stays within a day of its event (further away it would land on
another session's day, and a later sync would take the still-future timer for one that is no
longer planned), and a duration stays within what the caller allows (systemd turns a huge
RuntimeMaxSec= into "infinity"; datetime arithmetic overflows).
"""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+)(h|min|m|s)")
_WHOLE = re.compile(r"^([+-]?)((?:\d+(?:h|min|m|s))+)\Z")
_SECONDS = {"h": 3600, "min": 60, "m": 60, "s": 1}
_UNIT = {"m": "min"}  # two spellings, one unit
_REFUSED = ((re.compile(r"\d+M"), '"M" is months in systemd\'s spelling; write "min" or "m" for '
             "minutes"),
            (re.compile(r"\d+ms"), '"ms" is milliseconds; the smallest unit here is "s"'))
_MAX_DIGITS = 9  # more cannot be in range, and int() of thousands of digits is itself an error

MAX_OFFSET = 23 * 3600 + 59 * 60 + 59  # 86399 s: an offset stays within a day of its event
OFFSET_EXAMPLE = 'a signed duration such as "-15min", "+30min" or "+1h30min"'
DURATION_EXAMPLE = 'a duration such as "90s", "5min" or "1h30min"'


def _seconds(text: object, example: str) -> tuple[str, int]:
    """(sign, seconds) of a duration text; ValueError naming the right kind of example."""
    if not isinstance(text, str):
        what = "a number has no unit; " if isinstance(text, int | float) else ""
        raise ValueError(f"{what}write it as a string, {example}")
    s = text.strip().replace(" ", "")
    m = _WHOLE.match(s)
    if not m:
        for pattern, reason in _REFUSED:
            if pattern.search(s):
                raise ValueError(f"{reason}: {example}")
        raise ValueError(f"cannot parse; write {example} (units s, min or m, h)")
    sign, body = m.groups()
    parts = [(n, _UNIT.get(u, u)) for n, u in _PART.findall(body)]
    units = [u for _, u in parts]
    if len(set(units)) != len(units) or units != sorted(units, key=lambda u: -_SECONDS[u]):
        raise ValueError(f"units must appear once each, largest first (h, min, s): {example}")
    if any(len(n.lstrip("0")) > _MAX_DIGITS for n, _ in parts):
        return sign, 10 ** _MAX_DIGITS * 3600  # out of any range: the caller says which
    return sign, sum(int(n) * _SECONDS[u] for n, u in parts)


def parse_offset(text: object, limit: int = MAX_OFFSET) -> int:
    """Signed offset in seconds, within ±limit. Raises ValueError with a reason."""
    sign, total = _seconds(text, OFFSET_EXAMPLE)
    if total > limit:
        raise ValueError(f"must be within ±{format_duration(limit)} of its event (further away "
                         "it would fall on another session's day)")
    return -total if sign == "-" else total


def parse_duration(text: object, maximum: int, why: str = "") -> int:
    """Unsigned duration in seconds, more than zero and at most `maximum` (grace, timeout...)."""
    sign, total = _seconds(text, DURATION_EXAMPLE)
    if sign:
        raise ValueError(f"a duration has no sign; write {DURATION_EXAMPLE}")
    if total == 0:
        raise ValueError("must be more than zero")
    if total > maximum:
        raise ValueError(f"must be at most {format_duration(maximum)}" + (f" ({why})" if why
                                                                          else ""))
    return total


def format_duration(seconds: int) -> str:
    """90 -> "1min30s" (no sign)."""
    return format_offset(seconds)[1:]


def format_offset(seconds: int) -> str:
    """Inverse of parse_offset for display: -900 -> "-15min"."""
    sign = "-" if seconds < 0 else "+"
    rest = abs(seconds)
    parts = []
    for unit in ("h", "min", "s"):
        n, rest = divmod(rest, _SECONDS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return sign + ("".join(parts) or "0s")
