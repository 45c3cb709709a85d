"""A periodic job's session as its record step last counted it: `.slot-count` in the session's
slot-record directory (ledger.slot_records_dir). Written and read here only.

The record step (`market-timers-run --record`, runner/record.py) accounts the session's slots
after each slot's run or refused start and writes the count; the alert handler that systemd runs
next (OnFailure=/OnSuccess=, alerts/skipped_slots.py) reads it to raise the session's one skip
warning, so the handler tells and never counts. Not `*.json`: the directory's `*.json` files are
the slot records. Stdlib and files/ only (the record step is the runner's).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from market_timers.files import atomicfile, safefs

FILE = ".slot-count"


@dataclass(frozen=True)
class SlotCount:
    total: int  # the session's slots
    ran: int
    skipped: int
    ahead: int  # slots that may still start
    first_skipped: str | None
    text: str  # "cycle: 13 of 378 slots skipped so far, ..." (the accounting's own words)

    @classmethod
    def of(cls, summary, job: str) -> SlotCount:
        """From the accounting's summary (runner/slotaccount.Summary)."""
        return cls(summary.total, summary.ran, summary.skipped, summary.ahead,
                   summary.first_skipped, summary.text(job))


def write(directory: str | os.PathLike, count: SlotCount) -> None:
    # NONE (no fsync), as the slot records: a count for people, written again after every run.
    atomicfile.write(os.path.join(directory, FILE), json.dumps(asdict(count), sort_keys=True),
                     mode=0o644, sync=atomicfile.NONE, make_dirs=True)


def read(directory: str | os.PathLike, base: str | os.PathLike) -> SlotCount | None:
    """The count, or None when none was written or it does not read (a link is never followed:
    the directory is the job's to write, the reader may be root)."""
    data = safefs.read_json(os.path.join(directory, FILE), base=base)
    try:
        return SlotCount(**data) if isinstance(data, dict) else None
    except TypeError:
        return None
