"""The plan as columns (numpy): every fire of a calendar's jobs over years at once, for `plan`
over every calendar and `sync`'s long horizons; a Fire is made only when a column is iterated.

numpy is imported where the columns are built: importing the plan (status, the deadman's clock)
must not load it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from market_timers.config.loader import Job
from market_timers.schedule import calendar_sessions
from market_timers.schedule.fire import Fire


class FireColumns:
    """The fires of a plan as columns (numpy: job index, UTC seconds, session day), in Fire
    order; a Fire is made only when iterated, one at a time (so `plan --json` of every calendar
    over ten years holds some 16 bytes per fire, not a few hundred). Iterable any number of
    times; len() is the number of fires."""

    CHUNK = 8192  # fires turned into Python values at a time

    def __init__(self, jobs: list[tuple[str, str, str, int]], chunks: list[tuple],
                 why: dict[int, dict[int, str]] | None = None) -> None:
        import numpy as np

        self.jobs = jobs  # index -> (name, calendar, event, offset)
        self.why = why or {}  # job index -> session day -> why its rule chose it
        if chunks:
            job, seconds, day = (np.concatenate(c) for c in zip(*chunks, strict=True))
        else:
            job = seconds = day = np.zeros(0, dtype=np.int64)
        # Fire order is (fire_utc, job, calendar, session, event, offset); a job has one
        # calendar, event and offset, so (instant, job name, session) decides it.
        rank = np.empty(len(jobs), dtype=np.int64)
        rank[sorted(range(len(jobs)), key=lambda i: jobs[i][0])] = np.arange(len(jobs))
        order = np.lexsort((day, rank[job], seconds))
        self.job, self.seconds, self.day = job[order], seconds[order], day[order]

    def __len__(self) -> int:
        return len(self.seconds)

    def __iter__(self):
        jobs, whys = self.jobs, self.why
        for at in range(0, len(self), self.CHUNK):
            part = slice(at, at + self.CHUNK)
            for j, sec, day in zip(self.job[part].tolist(), self.seconds[part].tolist(),
                                   self.day[part].tolist(), strict=True):
                name, cal, event, offset = jobs[j]
                why = whys[j].get(day, "") if j in whys else ""
                yield Fire(datetime.fromtimestamp(sec, UTC), name, cal,
                           date.fromordinal(calendar_sessions.EPOCH_DAY + day), event, offset,
                           why=why)


def session_columns(index: int, job: Job, table: calendar_sessions.SessionTable,
                    chosen: dict[int, str] | None = None) -> tuple:
    import numpy as np

    instant = table.seconds[job.event]
    keep = instant != calendar_sessions.NO_TIME  # no break that day
    if chosen is not None:  # the sessions the job's rule chose (selection.py)
        keep &= np.isin(table.days, np.array(list(chosen), dtype=np.int64))
    if job.skip:
        skipped = [d.toordinal() - calendar_sessions.EPOCH_DAY for d in job.skip]
        keep &= ~np.isin(table.days, skipped)
    seconds = instant[keep] + job.offset
    return np.full(len(seconds), index, dtype=np.int64), seconds, table.days[keep]


def daily_columns(index: int, job: Job, start: date, end: date) -> tuple:
    import numpy as np

    first = start.toordinal() - calendar_sessions.EPOCH_DAY
    day = np.arange(first, first + max((end - start).days + 1, 0), dtype=np.int64)
    at = job.at_utc.hour * 3600 + job.at_utc.minute * 60 + job.at_utc.second
    return np.full(len(day), index, dtype=np.int64), day * 86400 + at, day
