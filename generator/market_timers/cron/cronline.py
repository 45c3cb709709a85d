"""The cron line of `market-timers check-cron`, read as Debian's cron reads it.

The line is read by cronsim, whose stated goal is to evaluate expressions exactly as Debian's
cron does (healthchecks.io uses it to check cron schedules): Sunday is 0 (7 too), and when both
day-of-month and day-of-week are restricted a day matching EITHER fires. Only the five-field form
and the @-macros cron knows are accepted (a macro is read as the line cronie's own table gives it);
extensions cron does not have (a sixth field for seconds, "H" hashing, "L", "#") are refused, so
the check never answers for a line that cron itself would reject or read differently. cronsim is
imported inside the function: the CLI imports this module, and only check-cron needs it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# What cron (cronie) accepts in a field: numbers, "*", ranges, steps, lists, and names for months
# and days of week. cronsim accepts more (L, #); those are refused.
_MONTHS = {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
_DAYS = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_ATOM = re.compile(r"^(?:\*|[0-9]+|[a-z]{3})\Z")
# cronie's macros and the lines they stand for (cronsim reads five fields only).
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}


def cron_line(expr: str) -> str:
    """The five-field line cron would run for `expr` (a macro expanded); ValueError if none."""
    from cronsim import CronSim, CronSimError

    text = expr.strip()
    if not text:
        raise ValueError("cron expression: empty; write five fields such as \"45 15 * * 1-5\"")
    if text.startswith("@"):
        if text.lower() == "@reboot":
            raise ValueError(f"cron expression {expr!r}: @reboot has no schedule to check")
        if text.lower() not in _MACROS:
            raise ValueError(f"cron expression {expr!r}: unknown macro; cron knows "
                             + ", ".join(sorted(_MACROS)))
        return _MACROS[text.lower()]
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"cron expression {expr!r}: has {len(fields)} fields, cron has 5 "
                         "(minute hour day-of-month month day-of-week)")
    for name, value in zip(_FIELD_NAMES, fields, strict=True):
        for atom in re.split(r"[,/-]", value.lower()):
            names = _MONTHS if name == "month" else _DAYS if name == "day of week" else set()
            if not _ATOM.match(atom) or (atom.isalpha() and atom not in names):
                raise ValueError(f"cron expression {expr!r}: {name} field {value!r} is not "
                                 "cron syntax (numbers, *, ranges a-b, steps /n, lists a,b"
                                 + (", names" if names else "") + ")")
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        raise ValueError(f"cron expression {expr!r}: a value is out of range (minute 0-59, "
                         "hour 0-23, day of month 1-31, month 1-12, day of week 0-7)") from None
    return text
