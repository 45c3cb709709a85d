"""A fault campaign's fires, faults and what became of each fire (tests/e2e/campaign.py runs
the campaign; bench/fault_campaign.py tables these counts): the questions a user would ask of
every fire, whatever fault was in play, and of the fires each kind of fault covered."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

# Where the nodes' alerts arrive, by the default routes: criticals at Telegram, warnings (a
# start dropped as its lock group's previous run still ran) at Slack
ALERT_SERVICES = ("telegram", "slack")


def alert_messages(api) -> list[dict]:
    """Every message the fake alert API received on ALERT_SERVICES."""
    return [m for service in ALERT_SERVICES for m in api.received(service)]


@dataclass
class Fire:
    job: str
    scheduled: float  # the instant (or the periodic job's slot), epoch seconds
    grace: float

    @property
    def slot(self) -> str:
        return datetime.fromtimestamp(self.scheduled, UTC).strftime("%H:%M:%S")


@dataclass
class Fault:
    at: float
    kind: str
    node: str
    seconds: float
    note: str = ""
    step: float = 0.0  # a clock-step's offset, seconds (+ ahead, - behind)
    # a halt's window: when `halt` was asked, when it returned, when `resume` was asked, when
    # that returned
    halted: tuple[float, float, float, float] | None = None


@dataclass
class Outcome:
    seed: int
    fires: list[Fire]
    faults: list[Fault]
    runs: dict[int, list[tuple[str, float]]] = field(default_factory=dict)  # fire -> (node, start)
    alerted: set[int] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)  # the texts the fake API received

    def twice(self) -> list[Fire]:
        return [f for i, f in enumerate(self.fires) if len(self.runs.get(i, [])) > 1]

    def late(self) -> list[Fire]:
        return [f for i, f in enumerate(self.fires)
                if any(start - f.scheduled > f.grace for _, start in self.runs.get(i, []))]

    def neither(self) -> list[Fire]:
        held = self.held()
        return [f for i, f in enumerate(self.fires)
                if not self.runs.get(i) and i not in self.alerted and f not in held]

    def _windows(self) -> list[tuple[float, float, float, float]]:
        return [f.halted for f in self.faults if f.halted]

    def held(self) -> list[Fire]:
        """Fires not run whose start (or the standby's, 2 s later) a halt may have covered: from
        when `halt` was asked (it is in force before it returns: a halt that waited on a held
        connection returned 2 s after a fire it refused, run 2 of a8d9860) until its resume
        returned. The halt's own alert told, once."""
        return [f for i, f in enumerate(self.fires) if not self.runs.get(i) and any(
            asked - 2 <= f.scheduled <= resumed + 2 for asked, _, _, resumed in self._windows())]

    def halted_runs(self) -> list[Fire]:
        """Fires with a start while a halt was surely in force: from a second after `halt`
        returned (a start that passed its last halt check before) until `resume` was asked."""
        return [f for i, f in enumerate(self.fires) if any(
            returned + 1 < when < asked for _, when in self.runs.get(i, [])
            for _, returned, asked, _ in self._windows())]

    def refused_alerted(self) -> list[Fire]:
        return [f for i, f in enumerate(self.fires) if not self.runs.get(i) and i in self.alerted]

    def exit0_failures(self) -> int:
        """Alerts that a unit "failed with exit status 0": its job ended well, its
        ExecStopPost= record step did not (see bench/RESULTS.md)."""
        return sum("failed with exit status 0" in m for m in self.messages)

    def ran(self) -> int:
        return sum(1 for i in range(len(self.fires)) if self.runs.get(i))

    def fault_of(self, fire: Fire, after: float) -> Fault | None:
        """The fault that covered a fire: the last one begun by its standby's start (2 s after
        the instant) and ended no more than `after` s before its instant (a node booting, a
        connection coming back, a standby's rebuild are still the fault's doing)."""
        covering = [f for f in self.faults
                    if f.at - 2 <= fire.scheduled <= f.at + f.seconds + after]
        return max(covering, key=lambda f: f.at, default=None)

    def by_fault_kind(self, after: float) -> dict[str, dict[str, int]]:
        """Per kind of fault (in the order they first came; "no fault" last): how many faults,
        the fires they covered (fault_of) and what became of those fires."""
        kinds = list(dict.fromkeys(f.kind for f in self.faults)) + ["no fault"]
        bad = {"ran twice": self.twice(), "ran later than grace": self.late(),
               "neither ran nor alerted": self.neither(),
               "refused and alerted": self.refused_alerted(), "held by a halt": self.held(),
               "halted jobs run": self.halted_runs()}
        counts = {}
        for kind in kinds:
            mine = [i for i, fire in enumerate(self.fires)
                    if getattr(self.fault_of(fire, after), "kind", "no fault") == kind]
            row = {"faults": sum(f.kind == kind for f in self.faults), "fires": len(mine),
                   "ran": sum(1 for i in mine if self.runs.get(i))}
            row.update({label: sum(1 for i in mine if self.fires[i] in fires)
                        for label, fires in bad.items()})
            counts[kind] = row
        return counts

    def summary(self) -> str:
        return (f"{len(self.fires)} fires, {len(self.faults)} faults (seed {self.seed}): ran "
                f"{self.ran()}, twice {len(self.twice())}, late {len(self.late())}, neither run "
                f"nor alerted {len(self.neither())}, refused and alerted "
                f"{len(self.refused_alerted())}, held by a halt {len(self.held())}, halted "
                f"jobs run {len(self.halted_runs())} ({len(self.messages)} messages)")


def alerted_fires(fires: list[Fire], messages: list[dict], periodic: str,
                  settle: float) -> set[int]:
    """The fires a message told of: one naming the job; for the periodic job (its alerts name
    no slot), one naming it that arrived, if stamped, from its slot to `settle` s past its
    grace. "X failed with exit status 0" is about a run that happened (its record step
    failed), not news that a fire did not run: it tells of no fire."""
    news = [m for m in messages if "failed with exit status 0" not in m["text"]]
    told = set()
    for i, fire in enumerate(fires):
        if fire.job == periodic:
            end = fire.scheduled + fire.grace + settle
            if any(periodic in m["text"] and fire.scheduled <= m.get("received", fire.scheduled)
                   <= end for m in news):
                told.add(i)
        elif any(fire.job in m["text"] for m in news):
            told.add(i)
    return told
