"""Once a day: the refresh's bookkeeping of what it already warned about today.

The refresh runs daily and after each boot; a warning such as "XSHG's data ends in 30 days" goes
out with the day's first refresh only. `<state_dir>/calendar-warned.json` maps what was warned
about to the day it last was.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import date
from pathlib import Path

from market_timers.files import atomicfile

log = logging.getLogger("market_timers.watch")

WARNED_FILE = "calendar-warned.json"  # in state_dir: calendar -> the day it was last warned about


def first_today(config, what: str, day: date) -> bool:
    """True (and remembered in state_dir) unless `what` was already warned about on `day`. Runs as
    the package user when the refresh runs as root; the file is never followed through a
    symlink (the state dir is the package user's)."""
    path = Path(config.state_dir) / WARNED_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            seen = json.loads(f.read() or b"{}")
        if not isinstance(seen, dict):
            seen = {}
    except FileNotFoundError:
        seen = {}
    except (OSError, ValueError) as e:  # unreadable or garbage: warn rather than stay silent
        log.warning("refresh: cannot read %s (%s): warning again", path, e)
        seen = {}
    if seen.get(what) == day.isoformat():
        return False
    seen[what] = day.isoformat()
    try:  # NONE (no fsync): a note lost at a power cut repeats a warning, the safe side
        atomicfile.write(path, json.dumps(seen, sort_keys=True), mode=0o644,
                         sync=atomicfile.NONE, make_dirs=True)
    except OSError as e:  # cannot remember: the warning may repeat, which is the safe side
        log.warning("refresh: cannot write %s: %s", path, e)
    return True
