"""Which of the runs still to come a halt or a pause in force will refuse: the status document
marks them (the table's "halted: scheduled", the page's halted cells)."""

from __future__ import annotations

from market_timers.ledger.halts import covers

# A run still to come: a halt or pause in force refuses its start when its instant comes.
AHEAD = ("scheduled", "due")


def _pause_holds(pause: dict, job: str, lock: str, session: str) -> bool:
    until = pause.get("until")
    return pause.get("scope") in (f"job {job}", f"lock group {lock}") and (
        not until or session < until)


def mark_held(sessions: dict[str, list[dict]], config, halts: list[dict],
              pauses: list[dict]) -> None:
    """Each row still to come that a halt (or else a pause) covers gains `held`: "halted" or
    "paused", and `held_by`: the scope ("order jobs (orders = true)", "job signal")."""
    jobs = {j.name: j for j in getattr(config, "jobs", None) or []}
    for session, rows in sessions.items():
        for row in rows:
            job = jobs.get(row["job"])
            if job is None or not str(row.get("result", "")).startswith(AHEAD):
                continue
            orders = bool(getattr(job, "orders", False))
            halt = next((h for h in halts if covers(h["scope"], h.get("name") or "", job.name,
                                                    job.lock, orders)), None)
            pause = next((p for p in pauses if _pause_holds(p, job.name, job.lock, session)),
                         None)
            if halt is not None:
                row.update(held="halted", held_by=halt.get("what", ""))
            elif pause is not None:
                row.update(held="paused", held_by=pause.get("scope", ""))
