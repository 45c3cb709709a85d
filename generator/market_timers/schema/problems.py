"""Config errors that name the file, the key and the bad value, collected rather than raised one by one.

Validation walks the whole config and reports every problem at once (as borgmatic does), so a user
fixes a config in one edit instead of one error per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ConfigProblem:
    path: str  # e.g. "job.closing.offset" (config/jobpath.py)
    message: str
    value: object = None
    has_value: bool = False

    def render(self, source: str, locate=None) -> str:
        """`source: path: message (got value)`; `source:LINE: ...` when `locate(path)` knows
        the line (a job's key: config/jobpath.py)."""
        shown = f" (got {self.value!r})" if self.has_value else ""
        line = locate(self.path) if locate is not None else None
        return f"{source}{f':{line}' if line else ''}: {self.path}: {self.message}{shown}"


_MISSING = object()


@dataclass
class Problems:
    """Collects ConfigProblems while a config is validated."""

    source: str = "<config>"
    items: list[ConfigProblem] = field(default_factory=list)
    locate: Any = None  # path -> its line in the file, or None (set by the config's loader)

    def add(self, path: str, message: str, value: object = _MISSING) -> None:
        has_value = value is not _MISSING
        self.items.append(ConfigProblem(path, message, value if has_value else None, has_value))

    def __bool__(self) -> bool:
        return bool(self.items)

    def lines(self) -> list[str]:
        return [p.render(self.source, self.locate) for p in self.items]


class ConfigError(Exception):
    """Raised after validation when there is at least one problem. Exit code 2 at the CLI."""

    def __init__(self, problems: Problems):
        self.problems = problems
        super().__init__("\n".join(problems.lines()))


def table_of(config, name: str, kind: type, parse):
    """config.<name> when it is a `kind` (the loader has parsed it), else the config's raw
    `[name]` table parsed now by `parse(raw, problems)`: ConfigError on any problem. For a config
    object built without the loader (tests, the alert snapshot's lenient copy)."""
    value = getattr(config, name, None)
    if isinstance(value, kind):
        return value
    problems = Problems(getattr(config, "source", "<config>"))
    value = parse((getattr(config, "raw", None) or {}).get(name), problems)
    if problems:
        raise ConfigError(problems)
    return value


def did_you_mean(name: str, choices, cutoff: float = 0.6) -> str:
    """'; did you mean A, B?' for the names closest to `name` (case-insensitive, shown as spelt
    in `choices`), or '' when none is close: the one hint every unknown-name error uses."""
    import difflib  # only when a name is unknown

    spelt = {c.upper(): c for c in choices}
    close = difflib.get_close_matches(name.upper(), list(spelt), n=3, cutoff=cutoff)
    return f"; did you mean {', '.join(spelt[c] for c in close)}?" if close else ""
