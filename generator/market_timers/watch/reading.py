"""What a dead-man pass reads: its cost follows what is due, not how many jobs exist.

A fire is judged once: at the first pass after its deadline (deadman.json's judged_utc is the last
pass that judged every fire due by then), and at every pass while its miss is open. The timers of
a new plan (a sync) are all read once; after that a pass reads those due within LOOKAHEAD only,
so a timer stopped by hand later is told that far ahead of its fire (and as a miss after it).
"""

from __future__ import annotations

from datetime import timedelta
from fnmatch import fnmatchcase

from market_timers.contracts.instants import iso, parse_iso
from market_timers.host.systemctl import Systemctl
from market_timers.watch import findings
from market_timers.watch.findings import PassResult
from market_timers.watch.fires import deadline, timer_state

LOOKAHEAD = timedelta(minutes=15)


def due_fires(fires: list[dict], judged: str | None, seen: dict[str, str], slack: int) -> list[dict]:
    """The fires a pass reads: those ahead, periodic sessions (slots.py judges those), a single
    fire whose deadline had not passed at the last pass that judged all (judged_utc), and one
    whose miss is open (it stays a finding). Every fire when no pass has judged yet."""
    if judged is None:
        return fires
    since = parse_iso(judged)
    open_misses = {tuple(k.split(":")[1:3]) for k in seen if k.startswith("missed:")}
    span = max((int(e.get("grace_sec", 0)) + int(e.get("timeout_sec", 0)) for e in fires),
               default=0)
    # fire_utc is ISO UTC: as strings fires sort as their instants, so most are passed over
    # without parsing (none before `oldest` can have a deadline after the last judging pass)
    oldest = iso(since - timedelta(seconds=span + slack + 1))
    # a fire after the judging pass has its deadline after it too: no parse for those ahead
    return [e for e in fires if e.get("every_sec") or (e["job"], e["session"]) in open_misses
            or (e["fire_utc"] >= oldest and (e["fire_utc"] > judged
                                             or deadline(e, slack) >= since))]

# A timer that will fire: waiting, or running its service now (a slot's run, a pre-fired start
# waiting for its instant, today's run of a daily unit): it waits again once the run ends.
SCHEDULED = ("waiting", "active/running")


def check_timers(upcoming: list[dict], systemctl: Systemctl, result: PassResult) -> bool:
    """A not-scheduled finding for each upcoming timer not waiting; False when systemd could not
    tell (the pass is then an error, and the timers are read again next pass)."""
    shown = systemctl.show([e["unit"] for e in upcoming], ["LoadState", "ActiveState", "SubState"])
    unknown = 0
    for entry in upcoming:
        what = timer_state(shown.get(entry["unit"], {}))
        if what == "unknown":
            unknown += 1
        elif what not in SCHEDULED:
            result.findings.append(findings.not_scheduled(entry, what))
    if unknown:
        result.errors.append(f"systemctl show told nothing about {unknown} timer(s): is "
                             "systemd reachable over D-Bus?")
    return not unknown


class FailedOnce:
    """A pass's systemctl: the failed units asked once for every check that wants them (the job
    units' sweep, the package's own services) by one `list-units --state=failed` of all their
    patterns. PID 1 filters by state before it matches names, where a listing of named units
    matches every unit it holds (10,000 timers) against each name. Other calls pass through."""

    def __init__(self, systemctl, patterns: list[str]):
        self._systemctl, self._patterns = systemctl, patterns
        self._failed: list[str] | None = None

    def failed_units(self, patterns: list[str]) -> list[str]:
        if self._failed is None:  # an error is raised to this caller; the next one asks again
            self._failed = self._systemctl.failed_units(self._patterns)
        return [u for u in self._failed if any(fnmatchcase(u, p) for p in patterns)]

    def __getattr__(self, name: str):
        return getattr(self._systemctl, name)
