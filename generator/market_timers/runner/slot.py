"""What a periodic job's start (MARKET_SLOT_EVERY_SEC, slotclock.py) adds to the one start
sequence (runner/__init__.py `_start`): the slot it belongs to (the latest at or before the start;
grace is measured from it, the ledger key is (job, session, slot)), and the slot's record for the
skip accounting (slotrecords.py), written beside the ledger at each outcome. Imported by the runner
only for a periodic job.
"""

import os
import time
from datetime import datetime

from market_timers import ledger
from market_timers.runner import slotclock
from market_timers.runner.start import WARNING, _now_text, _utc, log


class Slot:
    def __init__(self, env: dict, job: str, now: datetime):
        self.session = env.get("MARKET_SESSION", "")
        if not self.session:
            raise KeyError("MARKET_SESSION")
        self.instant = slotclock.Schedule.from_env(env).current(now)
        self.text = _utc(self.instant)
        self.key = ledger.Key(job, self.session, slotclock.slot_name(self.instant))
        self.what = f"{job} for session {self.session}, slot {self.text}"
        self.lock_label = f"{self.session} slot {self.text}"
        self.unreachable_what = f"this slot of {job}"
        self._state_dir = env.get("MARKET_STATE_DIR", "/var/lib/market-timers")
        self._invocation = env.get("INVOCATION_ID")

    def stale_message(self, late: float, grace: int) -> str:
        return (f"stale start: {self.what} is {late:.0f} s late, more than its grace of {grace} "
                "s; not running it (missed slots are not replayed)")

    def note(self, **fields) -> None:
        """The slot's record, for counting (never stops the job)."""
        try:
            record_key = slotclock.record_key(self.session, self.instant)
            if slotclock.write_new(self._state_dir, self.key.job, record_key, dict(
                    session=self.session, slot=self.text, scheduled_utc=self.text,
                    started_utc=_now_text(), started_mono=time.monotonic(),
                    invocation=self._invocation, result=None, **fields)):
                slotclock.write_pointer(self._state_dir, self.key.job, self.session,
                                        self._invocation, record_key)
        except OSError as e:
            log(WARNING, f"cannot write the slot record in {self._state_dir}: {e}")

    def ran(self, late: float, attempt: int) -> None:
        self.note(late_sec=round(late, 3), pid=os.getpid(), attempt=attempt)
