"""Offsets and durations as written in the config: "-15min", "+30min", "90s", "1h30min".

Hand-written on purpose: the accepted grammar is deliberately small (units s, min, h, optional
sign), so that a typo such as "15m" (minutes or months?) or "15" (which unit?) is an error that
names the key, rather than something a general parser (pandas.Timedelta, systemd.time) would
silently read its own way.
"""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+)(h|min|s)")
_WHOLE = re.compile(r"^([+-]?)((?:\d+(?:h|min|s))+)$")
_SECONDS = {"h": 3600, "min": 60, "s": 1}


def parse_offset(text: object) -> int:
    """Signed offset in seconds. Raises ValueError with a reason."""
    if not isinstance(text, str):
        raise ValueError('must be a string such as "-15min", "+30min", "90s" or "1h30min"')
    s = text.strip().replace(" ", "")
    m = _WHOLE.match(s)
    if not m:
        raise ValueError('cannot parse; write a signed duration with units s, min or h, such as '
                         '"-15min", "+30min", "90s" or "1h30min"')
    sign, body = m.groups()
    units = [u for _, u in _PART.findall(body)]
    if len(set(units)) != len(units) or units != sorted(units, key=lambda u: -_SECONDS[u]):
        raise ValueError("units must appear once each, largest first (h, min, s)")
    total = sum(int(n) * _SECONDS[u] for n, u in _PART.findall(body))
    return -total if sign == "-" else total


def parse_duration(text: object) -> int:
    """Unsigned duration in seconds (grace, timeout, watchdog...)."""
    seconds = parse_offset(text)
    if isinstance(text, str) and text.strip().startswith(("-", "+")):
        raise ValueError('a duration has no sign; write e.g. "5min"')
    return seconds


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
