"""The one way a config table declares its keys: `Key` (name, check, default, one-phrase doc) and
`Table` (its keys; parse a raw TOML table into the kept values).

Every table of the config (config/: the top level, [[job]], [overrides.<calendar>], [cluster],
[metrics], [watch], [events] and its rules, [alerts]; channels/: [alerts.<channel>]) declares a
Table; `Table.parse` then reports, with the same texts everywhere:

    <path>: must be a table (got ...)                    the value is not a TOML table
    <path>.<key>: unknown key (known: a, b, c)           a key the table does not declare
    <path>.<key>: <the check's reason> (got ...)         a value its check refuses

and keeps the default of every key that is absent or refused. A check returns the value to keep
or raises `Bad(reason)` (any ValueError: its text is the reason). Checks that involve several
keys stay plain code after the per-key pass, in the table's own module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from market_timers.schema.problems import Problems, did_you_mean

ECHO = object()  # Bad(shown=ECHO): the refused value is echoed as written (the default)
HIDE = object()  # Bad(shown=HIDE): nothing is echoed (it may be a secret)


class Bad(ValueError):
    """A value is refused; the text says why.

    `at` extends the key's path for a part of the value ("[2]", ".2026-12-24"); `shown` is the
    value echoed (ECHO: the key's value as written, HIDE: none). `Bad.each(bads)` (at least one)
    refuses several parts of one value at once, each its own problem.
    """

    def __init__(self, reason: str, *, at: str = "", shown: object = ECHO):
        super().__init__(reason)
        self.at = at
        self.shown = shown
        self.parts: tuple[Bad, ...] = (self,)

    @classmethod
    def each(cls, bads: Iterable[Bad]) -> Bad:
        bads = tuple(bads)
        out = cls(str(bads[0]), at=bads[0].at, shown=bads[0].shown)
        out.parts = bads
        return out


@dataclass(frozen=True)
class Key:
    name: str  # the TOML key
    check: Callable[[object], object] | None = None  # kept value, or raise Bad; None: as written
    default: object = None  # kept when the key is absent or refused
    doc: str = ""  # one phrase for the man page
    attr: str = ""  # the Python name when the key is a keyword ("from")
    required: bool = False  # absent: the check is given None, and its reason says what is wanted
    secret: bool = False  # a refused value is never echoed (someone may have pasted a secret)

    @property
    def field(self) -> str:
        return self.attr or self.name


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@dataclass(frozen=True)
class Table:
    keys: tuple[Key, ...]
    not_table: str = "must be a table"  # the reason when the value is not a TOML table
    sort_known: bool = True  # the known keys in sorted order (False: in declared order)
    refused: dict[str, str] = field(default_factory=dict)  # key -> why it is not a key (echoed)
    hint: Callable[[str], str] | None = None  # an unknown key -> what to add to its problem
    dynamic: tuple[str, ...] = ()  # keys accepted beside `keys`, declared elsewhere (tables)
    kind: str = "key"  # what a key of this table is, in "unknown key (known: ...)"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    def key(self, name: str) -> Key:
        return next(k for k in self.keys if k.name == name)

    def known(self) -> str:
        names = [*self.names, *self.dynamic]
        return ", ".join(sorted(names) if self.sort_known else names)

    def unknown(self, raw: dict, path: str, problems: Problems) -> None:
        """One problem per key of `raw` the table does not declare, in sorted order."""
        accepted = {*self.names, *self.dynamic}
        for name in sorted(set(raw) - accepted, key=str):
            self.unknown_one(name, raw[name], path, problems)

    def unknown_one(self, name: str, value: object, path: str, problems: Problems) -> None:
        if name in self.refused:
            problems.add(join(path, name), self.refused[name], value)
            return
        extra = (self.hint(name) if self.hint else "") or did_you_mean(
            str(name), [*self.names, *self.dynamic])
        problems.add(join(path, name), f"unknown {self.kind} (known: {self.known()}){extra}")

    def is_table(self, raw: object, path: str, problems: Problems) -> bool:
        if isinstance(raw, dict):
            return True
        problems.add(path, self.not_table, raw)
        return False

    def parse(self, raw: object, path: str, problems: Problems) -> dict[str, object] | None:
        """The kept value of every key (by `Key.field`), or None when `raw` is not a table.

        Problems, each named `<path>.<key>`: the unknown keys (sorted), then each declared key's
        refused value, in declared order.
        """
        if not self.is_table(raw, path, problems):
            return None
        self.unknown(raw, path, problems)
        return self.values(raw, path, problems)

    def values(self, raw: dict, path: str, problems: Problems) -> dict[str, object]:
        """The per-key pass of `parse` alone (`raw` is a table; unknown keys not reported)."""
        return {k.field: self.value(k, raw, path, problems) for k in self.keys}

    def check(self, name: str, raw: dict, path: str, problems: Problems) -> object:
        """The kept value of the key `name` alone: for checks that depend on other keys."""
        return self.value(self.key(name), raw, path, problems)

    def value(self, key: Key, raw: dict, path: str, problems: Problems) -> object:
        """One key's kept value: its checked value, or its default (absent or refused)."""
        if key.name in raw:
            value = raw[key.name]
        elif key.required:
            value = None
        else:
            return key.default
        if key.check is None:
            return value
        try:
            return key.check(value)
        except Bad as e:
            for part in e.parts:
                self.refuse(key, part, value, path, problems)
        except ValueError as e:
            self.refuse(key, Bad(str(e)), value, path, problems)
        return key.default

    @staticmethod
    def refuse(key: Key, bad: Bad, value: object, path: str, problems: Problems) -> None:
        where = join(path, key.name) + bad.at
        if key.secret or bad.shown is HIDE:
            problems.add(where, str(bad))
        else:
            problems.add(where, str(bad), value if bad.shown is ECHO else bad.shown)
