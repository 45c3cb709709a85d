"""Who runs an operator's command: the name its records and tickets carry ("by")."""

from __future__ import annotations

import os
import pwd


def operator_name() -> str:
    """The user behind sudo when there is one, else this process's user (its uid when unnamed)."""
    if os.environ.get("SUDO_USER"):
        return os.environ["SUDO_USER"]
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"
