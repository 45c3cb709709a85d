"""What a channel module declares: its settings (each with its check), its credentials, its class.

Each channel module (`channels/<name>.py`) ends with `SPEC = ChannelSpec(...)`; the registry
(`channels/__init__.py`) finds it by name. Everything else derives from the spec: the
`[alerts.<name>]` keys and their checks (problems name file, key and value like the rest of the
config), the credential names (`LoadCredential=` lines, `privileges.credential_names`), the docs
(`tests/project/test_docs.py` holds the man page to `summary`, every key and every default credential).

A setting's check returns the value to keep, or raises `Bad(reason)`. Underneath, the settings are
the config's one table declaration (schema/table.py): each Setting is a `Key` of the spec's
`table`, so `[alerts.<name>]` reports unknown keys, a value that is not a table and refused values
with the same texts as every other table (a refused value: "wrong type or range: <reason>", and
never the value of a credential name).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from market_timers.schema import values as checks
from market_timers.schema.table import Bad, Key, Table

# A credential name goes into a LoadCredential= line that root writes into a unit drop-in
# (credunits.py): no '/', no '%' (a unit specifier), no space or control character.
CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,199}")


@dataclass(frozen=True)
class Setting:
    key: str  # the TOML key in [alerts.<channel>]
    default: object
    doc: str  # one phrase for the man page
    check: Callable[[object], object]
    attr: str = ""  # the Python attribute when the key is a keyword ("from" -> sender)
    required: bool = False
    credential: bool = False  # the value is the *name* of a systemd credential

    @property
    def name(self) -> str:
        return self.attr or self.key

    def as_key(self) -> Key:
        """The setting as a schema Key (`required` stays the spec's: checked after the pass)."""
        if self.credential:  # never echoed: someone may have pasted the secret itself here
            return Key(self.key, self.check, self.default, self.doc, self.attr, secret=True)
        return Key(self.key, _range(self.check), self.default, self.doc, self.attr)


def _range(check: Callable[[object], object]) -> Callable[[object], object]:
    def checked(value):
        try:
            return check(value)
        except Bad as e:
            raise Bad(f"wrong type or range: {e}") from None
    return checked


# checks -----------------------------------------------------------------------------------------

def _text(value):
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Bad("must be a string")
    return str(value)


def _positive(value):
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise Bad("must be a number > 0")
    return float(value)


def _port(value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise Bad("must be an integer from 1 to 65535")
    return value


def _strings(value):
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise Bad("must be a list of non-empty strings")
    return list(value)


def _credential(value):
    if not isinstance(value, str) or not CREDENTIAL_NAME.fullmatch(value):
        # never echo it: someone may have pasted the secret itself here
        raise Bad("must be a credential name (a file name in /etc/credstore: letters, digits, "
                  "'.', '_', '-', '@', '+'), not the secret itself")
    return value


def text(key, default="", doc="", *, required=False, attr=""):
    return Setting(key, default, doc, _text, attr=attr, required=required)


def url(key, default, doc):
    """A URL that is not a secret; a malformed one fails each attempt, permanently (httppost)."""
    return Setting(key, default, doc, _text)


def number(key, default, doc):
    return Setting(key, float(default), doc, _positive)


def port(key, default, doc):
    return Setting(key, default, doc, _port)


def flag(key, default, doc):
    return Setting(key, default, doc, checks.flag)


def strings(key, doc, *, required=False):
    return Setting(key, (), doc, _strings, required=required)


def credential(key, default, doc):
    return Setting(key, default, doc, _credential, credential=True)


def timeout():
    return number("timeout", 10, "seconds, default 10: the deadline of a whole attempt, "
                                 "connection and answer included; a redirect is never followed")


# the spec ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChannelSpec:
    name: str
    summary: str  # one sentence for the docs: what it sends where
    settings: tuple[Setting, ...]
    channel: type  # the Channel subclass: cls(settings, env=...).send(alert)
    # text fitting: fit(alert) -> the text sent, at most `limit` units of `measure`; None = whole.
    # `fits` says which text that is: "body" (alert.body()), "message" (the body without the
    # subject, shown as a title of its own) or "subject" (a one-line summary).
    fit: Callable | None = None
    fits: str = "body"
    limit: int | None = None
    measure: Callable[[str], int] = len
    validate: Callable[[object, Callable[[str, str], None]], None] | None = None  # cross-key

    @cached_property
    def settings_class(self) -> type:
        fields = [(s.name, object, dataclasses.field(
            default_factory=(lambda d=s.default: list(d) if isinstance(d, tuple) else d)))
            for s in self.settings]
        return dataclasses.make_dataclass(f"{self.name.capitalize()}Settings", fields)

    def make_settings(self, **values):
        """The settings object with its defaults, `values` (by attribute name) overriding."""
        return self.settings_class(**values)

    @property
    def keys(self) -> list[str]:
        return [s.key for s in self.settings]

    def credentials(self) -> list[Setting]:
        return [s for s in self.settings if s.credential]

    def credential_names(self, settings) -> list[str]:
        """The credential names these settings use (config renames applied)."""
        return [getattr(settings, s.name) for s in self.credentials()
                if getattr(settings, s.name, "")]

    @cached_property
    def table(self) -> Table:
        """`[alerts.<name>]` as a schema Table: one Key per setting."""
        return Table(tuple(s.as_key() for s in self.settings))

    def parse(self, raw: object, problems, path: str | None = None):
        """The settings of `[alerts.<name>]`; every problem goes to `problems` with its key."""
        path = path or f"alerts.{self.name}"
        values = self.table.parse(raw, path, problems)
        if values is None:
            return None
        obj = self.make_settings(**{name: list(v) if isinstance(v, tuple) else v
                                    for name, v in values.items()})
        for s in self.settings:
            if s.required and not getattr(obj, s.name):
                problems.add(f"{path}.{s.key}", f"is required for the {self.name} channel")
        if self.validate is not None:
            self.validate(obj, lambda key, reason: problems.add(f"{path}.{key}", reason))
        return obj
