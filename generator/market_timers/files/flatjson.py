"""JSON of a flat record (names to str, int, float, bool or None) without importing `json`.

The runner (slot records) and `jobnotify.event()` (the event spool) write such records on paths
where `import json` would cost milliseconds; their readers use `json`. Keys are sorted and every
character below space, `"` and `\\` is written as a \\u escape, so any text round-trips.
"""


def value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    text = str(v)
    return '"' + "".join(c if c >= " " and c not in '"\\' else f"\\u{ord(c):04x}"
                         for c in text) + '"'


def dumps(fields: dict) -> str:
    """One JSON object and a newline."""
    return "{" + ", ".join(f"{value(str(k))}: {value(v)}" for k, v in sorted(fields.items())) \
        + "}\n"
