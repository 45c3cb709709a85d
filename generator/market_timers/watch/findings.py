"""What a dead-man pass finds, and the words its alerts carry.

A Finding is one thing wrong right now (a missed run, a timer that will not fire, the cluster
ledger out of reach); its `key` is what deadman.json remembers as reported, so each is alerted
once. PassResult is one pass's outcome, which the heartbeat reports (/fail on anything new).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from market_timers.config.watch import WatchConfig
from market_timers.contracts.instants import iso

UNREACHABLE_KEY = "ledger-unreachable"


@dataclass(frozen=True)
class Finding:
    kind: str  # "missed" | "not-scheduled" | "ledger-unreachable"
    key: str  # what deadman.json remembers as reported
    job: str
    session: str
    text: str
    severity: str = "critical"  # the job's severity (the alert layer may lower it by its rules)
    headline: str = ""  # the alert's title, when not one of title()'s (endsweep.py)


@dataclass
class PassResult:
    findings: list[Finding] = field(default_factory=list)  # everything wrong right now
    new: list[Finding] = field(default_factory=list)  # reported (alerted) by this pass
    errors: list[str] = field(default_factory=list)  # the pass could not check something
    # The package's own parts that are not working (an alert undeliverable on every channel, a
    # failed unit of the package): reported by the heartbeat as /fail at every pass while they
    # last, without failing the pass itself (it did its job).
    unhealthy: list[str] = field(default_factory=list)
    ping: str | None = None  # "ok" | "fail" | None (off, no URL)
    ping_delivered: bool | None = None

    @property
    def failed(self) -> bool:
        """What the heartbeat reports as /fail: a new problem, a pass that could not look, or a
        part of the package that is not working."""
        return bool(self.new or self.errors or self.unhealthy)


def title(f: Finding) -> str:
    if f.headline:
        return f.headline
    if f.kind == UNREACHABLE_KEY:
        return "the cluster run ledger cannot be reached: the deadman cannot tell what ran"
    if f.kind == "missed":
        return f"{f.job} did not run for session {f.session}"
    if f.job:
        return f"{f.job} is not scheduled for session {f.session}"
    return "no market timer is scheduled ahead"


def unreachable(config, error: Exception) -> Finding:
    node = config.cluster.node
    return Finding(
        UNREACHABLE_KEY, UNREACHABLE_KEY, "", "",
        f"Node {node}: the cluster run ledger (PostgreSQL, credential "
        f"market-timers.cluster-dsn) cannot be reached ({error}). The deadman cannot tell which "
        "jobs ran on which node, so it reports no miss until the ledger is back; the runners "
        "follow [cluster] on_db_unreachable. Check the database and `market-timers cluster "
        "status`.")


def missed(entry: dict, due: datetime, now: datetime, watch: WatchConfig) -> Finding:
    job, session = entry["job"], entry["session"]
    late = int((now - due).total_seconds() // 60)
    text = (f"{job} ({entry.get('calendar', '?')} {session}, {entry.get('event', '?')} "
            f"{entry.get('offset', '')}) was due at {entry['fire_utc']} and has no run record "
            f"{late} min after its deadline {iso(due)} (grace {entry.get('grace_sec', 0)}s + "
            f"timeout {entry.get('timeout_sec', 0)}s + slack {watch.slack_sec}s): the timer did "
            f"not fire or the runner never started. Check `systemctl status {entry.get('unit')}` "
            f"and `journalctl MARKET_JOB={job} MARKET_SESSION={session}`.")
    return Finding("missed", f"missed:{job}:{session}", job, session, text,
                   entry.get("severity", "critical"))


def not_scheduled(entry: dict, what: str) -> Finding:
    job, session = entry["job"], entry["session"]
    text = (f"{job} ({entry.get('calendar', '?')} {session}) is planned for {entry['fire_utc']} "
            f"but its timer {entry['unit']} is {what}, not waiting: it will not fire. Run "
            "`market-timers sync` (it starts missing timers) and check `systemctl status "
            f"{entry['unit']}`.")
    return Finding("not-scheduled", f"not-scheduled:{job}:{session}:{entry['unit']}", job,
                   session, text, entry.get("severity", "critical"))


def nothing_ahead(since: str) -> Finding:
    return Finding(
        "not-scheduled", nothing_ahead_key(since), "", "",
        f"No market timer is planned ahead: the last sync was at {since} and every fire it "
        "planned has passed. Is market-refresh.timer running? Check `systemctl status "
        "market-refresh.service` and run `market-timers sync`.")


def nothing_ahead_key(since: str) -> str:
    return f"not-scheduled:nothing-ahead:{since}"
