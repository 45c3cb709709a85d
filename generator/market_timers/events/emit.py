"""`market-timers event KIND ...`: spool one event, fast (a gateway may call it in a burst).

Only the two keys it needs are read from the config file, `spool_dir` and `runtime_dir` (a
lenient read: the rest of the file is not validated, a broken job or channel does not stop an
event); the config loader, the router and the channels are never imported. A value that is not an
absolute path, or a file that is not TOML, is named on stderr and the default directories (or
$MARKET_EVENTS_DIR) are used: the event is never lost for the config's sake.
"""

from __future__ import annotations

import os
import sys

from market_timers.contracts import environment
from market_timers.events import spool

PREFIX = "market-timers event"


def configured_dirs(path: str) -> list[str]:
    """The spool directories named by the config file at `path` (its spool_dir and runtime_dir
    keys only), else the defaults, after a line on stderr naming the file, key and value."""
    import tomllib  # only when a config is read: the jobs' event() stays light

    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        return spool.directories()
    except (OSError, tomllib.TOMLDecodeError) as e:
        reason = "not valid TOML" if isinstance(e, tomllib.TOMLDecodeError) else \
            (e.strerror or str(e))
        print(f"{PREFIX}: {path}: {reason} ({str(e).splitlines()[0]}); using the default spool "
              "directory", file=sys.stderr)
        return spool.directories()
    dirs = {}
    for key, default in (("spool_dir", environment.DEFAULT_SPOOL_DIR),
                         ("runtime_dir", environment.DEFAULT_RUNTIME_DIR)):
        value = raw.get(key, default)
        if not isinstance(value, str) or not os.path.isabs(value):
            print(f"{PREFIX}: {path}: {key} = {value!r} is not an absolute path; using the "
                  "default spool directory", file=sys.stderr)
            return spool.directories()
        dirs[key] = value
    return spool.config_directories(dirs["spool_dir"], dirs["runtime_dir"])


def emit_command(args, dirs: list[str]) -> int:
    """Spool the event of `args` in `dirs`; 0 spooled, 1 not spooled, 2 bad args."""
    at = args.now.timestamp() if getattr(args, "now", None) else None
    try:
        event = spool.make_event(args.kind, key=args.key or "", severity=args.severity or "",
                                 text=args.text or "", job=args.job or "",
                                 session=args.session.isoformat() if args.session else "",
                                 value=args.value, at=at)
    except spool.EventError as e:
        print(f"{PREFIX}: {e}", file=sys.stderr)
        return 2
    try:
        path = spool.write(event, dirs)
    except OSError as e:
        print(f"{PREFIX}: NOT SPOOLED in {', '.join(dirs)}: {e.strerror or e}: "
              f"{event['kind']} key={event['key'] or '-'} at={event['at']} {event['text']}",
              file=sys.stderr)
        return 1
    if path and not path.startswith(dirs[0]):
        print(f"{PREFIX}: {dirs[0]} failed; spooled in {path} (not kept across a reboot)",
              file=sys.stderr)
    return 0
