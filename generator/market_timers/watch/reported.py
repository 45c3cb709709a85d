"""`<state_dir>/deadman.json`: what the dead-man pass has already reported (one alert per finding).

{"reported": {key: first reported (UTC)}, "last_pass_utc": ...}. An unreadable file starts afresh
(the alert layer's dedup window holds back the repeats); a file that cannot be written is logged
and the alerts still go out.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from market_timers.files import atomicfile, safefs
from market_timers.watch.findings import UNREACHABLE_KEY

log = logging.getLogger("market_timers.watch")

STATE_FILE = "deadman.json"


def load(state_dir: Path) -> dict:
    try:
        doc = json.loads(safefs.read_bytes(state_dir / STATE_FILE, base=state_dir))
        return doc if isinstance(doc, dict) else {}
    except FileNotFoundError:
        return {}
    except OSError as e:
        log.error("deadman: cannot read %s (%s); starting afresh", state_dir / STATE_FILE, e)
        return {}
    except ValueError:
        log.error("deadman: %s is not valid JSON; starting afresh", state_dir / STATE_FILE)
        return {}


def save(state_dir: Path, state: dict) -> None:
    path = state_dir / STATE_FILE
    try:
        safefs.write_json(path, state, base=state_dir, sync=atomicfile.DURABLE)
    except OSError as e:
        # The alerts still go out (the alert layer's dedup window holds back repeats).
        log.error("deadman: cannot write %s: %s", path, e)


def still_live(reported: dict[str, str], fires: list[dict], nothing_ahead: str,
               unreachable: bool) -> dict[str, str]:
    """Forget what plan.json forgot (past its retention), so deadman.json stays small; an outage
    of the ledger is forgotten when it ends, so that the next one is reported again."""
    if not reported:  # the idle pass's usual case: no set of every planned fire to build
        return {}
    live = {f"{e['job']}|{e['session']}" for e in fires}
    return {k: v for k, v in reported.items()
            if k == nothing_ahead or _pair(k) in live
            or (k == UNREACHABLE_KEY and unreachable)}


def _pair(key: str) -> str:
    parts = key.split(":")
    return f"{parts[1]}|{parts[2]}" if len(parts) >= 3 else ""
