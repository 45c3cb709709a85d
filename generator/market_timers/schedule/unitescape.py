"""Values escaped for the unit-file directive they land in: the one guard between a config value
and a root-run unit (render.py writes every value through these).
"""

from __future__ import annotations

import re

# Each value is escaped for the directive it lands in (systemd.syntax(7), systemd.exec(7)):
# * ExecStart=: quoted words with C escapes; `%` specifiers and `$VAR` expansion, so `%%`, `$$`.
# * Environment=: quoted words with C escapes; `%` specifiers but NO `$` expansion, so `%%` only.
# * ReadWritePaths=: quoted words (backslash escapes, no C escapes); `%` specifiers.
# * Description=: the raw rest of the line; `%` specifiers; no quoting exists.
# The config refuses control characters (but a tab in arguments and environment values) and a
# trailing backslash (schema/values.py unit_unsafe); these functions refuse them too, so nothing
# unchecked reaches a unit.
_NEEDS_QUOTES = frozenset(' \t"\'\\;')
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


class UnsafeValue(ValueError):
    """A value that cannot be written into a unit file safely (the config should have refused it)."""


def _refuse_control(text: str, allow_tab: bool = True) -> str:
    m = _CONTROL.search(text) or (None if allow_tab else re.search("\t", text))
    if m:
        raise UnsafeValue(f"control character U+{ord(m.group()):04X} in {text!r}")
    return text


def _quoted(word: str, c_escapes: bool) -> str:
    """word as one systemd word: bare when it can be, else in double quotes."""
    if word and _NEEDS_QUOTES.isdisjoint(word):
        return word
    body = word.replace("\\", "\\\\").replace('"', '\\"')
    if c_escapes:
        body = body.replace("\t", "\\t")
    elif "\t" in body:
        raise UnsafeValue(f"a tab cannot be written in this setting: {word!r}")
    return f'"{body}"'


def quote_arg(arg: str) -> str:
    """One ExecStart= argument, received by the program exactly as given."""
    _refuse_control(arg)
    return _quoted(arg.replace("%", "%%").replace("$", "$$"), c_escapes=True)


def quote_env(name: str, value: str) -> str:
    """One Environment= assignment: systemd does not expand `$` here, only `%` specifiers."""
    _refuse_control(value)
    return _quoted(f"{name}={value}".replace("%", "%%"), c_escapes=True)


def quote_path(path: str, prefix: str = "-") -> str:
    """One path of ReadWritePaths= (and the like); `-`: a missing path is not an error."""
    _refuse_control(path, allow_tab=False)
    return _quoted(f"{prefix}{path}".replace("%", "%%"), c_escapes=False)


def plain(text: str) -> str:
    """Free text for Description=: no specifier expansion, one line, no continuation."""
    line = " ".join(_refuse_control(text).replace("%", "%%").split())
    if line.endswith("\\"):
        raise UnsafeValue(f"a trailing backslash would join the next line: {text!r}")
    return line


def comment(text: str) -> str:
    """Text for a comment line: control characters shown as \\xNN, never a line break."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)
