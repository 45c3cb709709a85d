"""Secrets from systemd credentials: `$CREDENTIALS_DIRECTORY/<name>`, never from env or argv.

The handler and outbox units load them with the name-only form `LoadCredential=<name>`, which
systemd (>= 251) resolves in /etc/credstore, /run/credstore and /usr/lib/credstore and *skips*
when absent, so an unconfigured channel does not fail the unit (an absolute path that does not
exist would fail it with 243/CREDENTIALS). Outside systemd (tests, `alert --test` from a shell)
`MARKET_TIMERS_CREDENTIALS_DIRECTORY` points at a directory of such files and takes precedence.
"""

from __future__ import annotations

import os
from pathlib import Path

OVERRIDE = "MARKET_TIMERS_CREDENTIALS_DIRECTORY"


def credentials_directory(env: dict | None = None) -> Path | None:
    env = os.environ if env is None else env
    value = env.get(OVERRIDE) or env.get("CREDENTIALS_DIRECTORY")
    return Path(value) if value else None


def read_credential(name: str, env: dict | None = None) -> str | None:
    """The secret's text without its trailing newline, or None when it is not available."""
    directory = credentials_directory(env)
    if directory is None or not name or "/" in name:
        return None
    try:
        value = (directory / name).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return value or None


def redact(text: str, secrets: list[str | None]) -> str:
    """Replace every secret in `text`; used on anything derived from an exception before logging."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[secret]")
    return text
