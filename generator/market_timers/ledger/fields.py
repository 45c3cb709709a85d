"""The ledger's record format: one `name=value` per line (str methods only: the runner's hot
path)."""

# Records: one `name=value` per line. The runner writes and reads them with str methods only
# (json costs it ~5 ms of imports); values are escaped so that a line is always one field.

NUMBERS = {"pid": int, "attempt": int, "late_sec": float, "started_mono": float,
           "duration_sec": float}


def format_fields(fields: dict) -> str:
    lines = []
    for name, value in fields.items():
        if value is None:
            continue
        text = str(value).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") \
            .replace("\0", "\\0")
        lines.append(f"{name}={text}\n")
    return "".join(lines)


def parse_fields(text: str) -> dict:
    out: dict = {}
    # split("\n"), not splitlines(): that also splits on \v, \f, \x1c-\x1e, \x85, U+2028 and
    # U+2029, which format_fields leaves as they are: a value holding one would inject fields.
    for line in text.split("\n"):
        name, sep, value = line.partition("=")
        if not sep:
            continue
        value = "\\".join(part.replace("\\n", "\n").replace("\\r", "\r").replace("\\0", "\0")
                          for part in value.split("\\\\"))
        kind = NUMBERS.get(name)
        if kind is not None:
            try:
                out[name] = kind(value)
                continue
            except ValueError:
                pass
        out[name] = value
    return out


def describe(holder: dict) -> str:
    """'at 2025-11-26T20:50:00.012Z on host ny4-a (pid 4242, attempt 1, timer)'."""
    return (f"at {holder.get('started_utc', '?')} on host {holder.get('host', '?')} "
            f"(pid {holder.get('pid', '?')}, attempt {holder.get('attempt', '?')}, "
            f"{holder.get('how', '?')})")
