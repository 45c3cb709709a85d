"""`market-timers deadman`: compare the plan with what actually ran (market-deadman.timer, every minute).

One pass reads `<state_dir>/plan.json` (every fire sync planned while it was still ahead: it comes
from the exchange calendar, so a holiday has no entry and an early close has its moved instant),
the run records and the states of the upcoming timers (what it reads: reading.py), and finds:

* missed: a planned (job, session) whose instant + grace + timeout + slack has passed with nothing
  in the run ledger (runrecord.read). The runner claims the (job, session) before it execs the
  job (a stale start, an overlap skip or an "already ran" leaves a note too, and those have their
  own alerts), so nothing in the ledger means the job never started:
  the timer did not fire, the host was down past the grace, the unit was removed... One critical
  alert per (job, session), ever: what was reported is kept in `<state_dir>/deadman.json`. The
  alert layer records the job's last outcome as "missed", so its next success sends a recovery.
* not-scheduled: an upcoming planned fire whose timer is not loaded and waiting in systemd (or no
  fire planned ahead at all: the refresh has stopped). One critical alert per timer.

In cluster mode ([cluster]: the run ledger on PostgreSQL, shared by the nodes) "ran" means ran on
any node (the cluster ledger, then this node's local ledger for a run that fell back to it). Every
node's deadman checks, but a miss is alerted once across the cluster: only the node whose
`note_miss` inserts the (job, session) first reports it, so a dead preferred node's misses are
reported by the standby. When the ledger cannot be reached nothing is judged missed (nothing can
be known): one critical `ledger-unreachable` alert says so, once per outage on each node (kept in
deadman.json while it lasts), and the heartbeat pings /fail.

Each pass then pings the external heartbeat if `[watch] ping = true` (heartbeat.py).

Here: the pass and `market-timers deadman`. The plan's fires and their deadlines: fires.py; the
findings and their texts: findings.py; periodic jobs' slots: slots.py; deadman.json: reported.py.

The clock is injected (`now`); nothing here sleeps.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from pathlib import Path

from market_timers.alerts.model import UNDELIVERABLE
from market_timers.alerts.outbox import Outbox
from market_timers.alerts.snapshot import announce
from market_timers.config.watch import WatchConfig, watch_of
from market_timers.contracts import journal, unitname
from market_timers.contracts.instants import iso, parse_iso
from market_timers.files import atomicfile, safefs
from market_timers.host.clock import utcnow
from market_timers.host.systemctl import Systemctl
from market_timers.ledger import DatabaseError, Key, runrecord
from market_timers.ledger.halts import cluster_records as halt_records
from market_timers.ledger.halts import halted
from market_timers.ledger.pauses import cluster_records as pause_records
from market_timers.ledger.pauses import holds, paused
from market_timers.watch import endsweep, findings, recordcache, reported, slots, statuspage
from market_timers.watch.alert import send_alert
from market_timers.watch.findings import UNREACHABLE_KEY, PassResult
from market_timers.watch.fires import PLAN_FILE, deadline, read_plan
from market_timers.watch.heartbeat import heartbeat
from market_timers.watch.reading import LOOKAHEAD, FailedOnce, check_timers, due_fires

REFRESH_OVERDUE = timedelta(hours=26)  # market-refresh.timer runs daily (and at boot)
log = logging.getLogger("market_timers.watch")


def run_pass(config, now: datetime, *, systemctl: Systemctl | None = None,
             alert=send_alert, env: dict | None = None, ping: bool = True) -> PassResult:
    """One dead-man pass. Alerts go through `alert` (tests record them); never raises for them."""
    watch = watch_of(config)
    systemctl = FailedOnce(systemctl or Systemctl(), [endsweep.SWEEP_GLOB, *OWN_SERVICES])
    state_dir = Path(config.state_dir)
    result = PassResult()
    try:
        _check(config, watch, now, systemctl, state_dir, result, alert)
    except Exception as e:  # a broken pass still pings /fail and reports in the journal
        log.exception("deadman: the pass failed")
        result.errors.append(f"the pass failed: {type(e).__name__}: {e}")
    endsweep.check_ends(config, systemctl, now, result)  # a stuck handler, an untold failure
    for finding in result.new:
        try:
            alert(config, kind=finding.kind, key=finding.key, text=finding.text,
                  job=finding.job, session=finding.session, job_severity=finding.severity,
                  title=findings.title(finding), now=now)
        except Exception:  # the journal still has it (command() logs every new finding)
            log.exception("deadman: could not raise the %s alert %s", finding.kind, finding.key)
    try:
        own_parts(config, systemctl, result)
    except Exception as e:  # the ping still goes out, saying the check itself broke
        log.exception("deadman: cannot check the package's own units and outbox")
        result.unhealthy.append(f"cannot check the package's own parts: {type(e).__name__}")
    try:  # in a cluster: this node's halt-watch still looks (issue 44)
        from market_timers.watch.haltwatch_fresh import check_halt_watch

        check_halt_watch(config, now, result, alert)
    except Exception as e:
        log.exception("deadman: cannot check halt-watch")
        result.unhealthy.append(f"cannot check halt-watch: {type(e).__name__}")
    if ping:
        heartbeat(watch, result, env)
    return result


# The package's own services that a dead-man pass watches (the deadman itself is running).
OWN_SERVICES = tuple(u for u in unitname.PACKAGE_SERVICES if u != "market-deadman.service")


def own_parts(config, systemctl: Systemctl, result: PassResult) -> None:
    """What makes the heartbeat /fail for as long as it lasts, beyond the pass's findings: an
    alert that is undeliverable on every channel of its chain (the outside watcher is then the
    only one who can learn of it), and a failed unit of the package's own."""
    spool = getattr(config, "spool_dir", None)
    if spool is not None:
        stuck = [a for a in Outbox(spool).load_all() if a.state == UNDELIVERABLE]
        if stuck:
            log.error("deadman: %d alert(s) undeliverable on every channel (first: %s %s)",
                      len(stuck), stuck[0].id, stuck[0].title)
            result.unhealthy.append(f"{len(stuck)} alert(s) undeliverable on every channel "
                                    f"(first: {stuck[0].title})")
    listed = set(systemctl.failed_units(list(OWN_SERVICES)))
    failed = [u for u in OWN_SERVICES if u in listed]
    if failed:
        log.error("deadman: failed unit(s) of the package: %s", ", ".join(failed))
        result.unhealthy.append(f"failed: {', '.join(failed)}")


def _check(config, watch: WatchConfig, now: datetime, systemctl: Systemctl, state_dir: Path,
           result: PassResult, alert=send_alert) -> None:
    plan = read_plan(state_dir)
    session_jobs = [j for j in config.jobs if j.is_session_job]
    if plan is None:
        if session_jobs:
            result.errors.append(f"no {state_dir / PLAN_FILE}: sync has never run (the refresh "
                                 "timer runs it daily and at boot)")
        return
    fires = plan.get("fires", [])
    state = reported.load(state_dir)
    seen: dict[str, str] = state.setdefault("reported", {})
    jobs = {j.name for j in config.jobs}
    if getattr(config, "broken", None) is not None:  # degraded config: trust the last plan
        jobs |= {e["job"] for e in fires}

    # Every upcoming timer is read once per plan (the first pass after a sync), then only
    # those due within LOOKAHEAD; a fire is judged once its deadline has passed (_due).
    checked = state.get("timers_checked") == plan.get("generated_utc")
    book = runrecord.cluster_book(config)  # None: the local ledger only
    try:
        upcoming, ahead = _check_fires(
            config, watch, now, state_dir,
            due_fires(fires, state.get("judged_utc"), seen, watch.slack_sec), jobs, seen, book,
            result, alert, until=now + LOOKAHEAD if checked else None)
    finally:
        if book is not None:
            book.close()
    if not result.errors:
        state["judged_utc"] = iso(now)  # the fires due by now are judged: not read again
    generated = parse_iso(plan["generated_utc"]) if plan.get("generated_utc") else None
    settling = generated is not None and now - generated < timedelta(seconds=watch.slack_sec)
    if settling or _sync_running(state_dir):
        log.info("deadman: a sync is running or has just finished; timers checked next pass")
    elif upcoming:
        if check_timers(upcoming, systemctl, result):
            state["timers_checked"] = plan.get("generated_utc")
    elif session_jobs and not ahead and (generated is None or now - generated > REFRESH_OVERDUE):
        # With a short horizon nothing may be ahead between the day's last fire and the next
        # daily refresh: that is only a problem once the refresh is overdue.
        result.findings.append(findings.nothing_ahead(plan.get("generated_utc", "?")))
    elif ahead and not checked:
        state["timers_checked"] = plan.get("generated_utc")  # all ahead ran early, by hand

    slots.prune_records(config, state_dir, now)
    for finding in result.findings:
        if finding.key not in seen:
            result.new.append(finding)
            seen[finding.key] = iso(now)
    state["reported"] = reported.still_live(
        seen, fires, findings.nothing_ahead_key(plan.get("generated_utc", "?")),
        unreachable=any(f.key == UNREACHABLE_KEY for f in result.findings))
    state["last_pass_utc"] = iso(now)
    reported.save(state_dir, state)


class _Holds:
    """Whether a pause or a halt holds a fire's session: each job's read once a pass, the
    cluster ledger's pauses and halts at the first need (an unreachable ledger: none, the
    ledger-unreachable finding says so)."""

    def __init__(self, config, state_dir: Path, book):
        # A degraded config's snapshot jobs have no lock group: their job pauses still count.
        self.groups = {j.name: getattr(j, "lock", "") or j.name for j in config.jobs}
        self.orders = {j.name for j in config.jobs if getattr(j, "orders", False)}
        self.state_dir, self.book = str(state_dir), book
        self.pauses: dict[str, dict | None] = {}  # job -> the pause in force
        self.cluster: list = []  # the cluster ledger's pauses and halts

    def __call__(self, entry: dict) -> bool:
        job = entry["job"]
        if not self.cluster:
            try:
                self.cluster.extend((pause_records(self.book), halt_records(self.book))
                                    if self.book is not None else (None, None))
            except DatabaseError:
                self.cluster[:] = [None, None]
        if job not in self.pauses:
            group = self.groups.get(job, job)
            self.pauses[job] = paused(self.state_dir, job, group, "0000-00-00",
                                      cluster=self.cluster[0]) or \
                halted(self.state_dir, job, group, job in self.orders, cluster=self.cluster[1])
        return self.pauses[job] is not None and holds(self.pauses[job], entry["session"])


def _check_fires(config, watch: WatchConfig, now: datetime, state_dir: Path, fires: list[dict],
                 jobs: set[str], seen: dict[str, str], book, result: PassResult,
                 alert, until: datetime | None = None) -> tuple[list, bool]:
    """The misses (result.findings), the upcoming fires (due by `until`, if given) that have
    not run, to check their timers, and whether any fire is ahead at all.

    With the cluster ledger (`book`): a miss already reported, by this node or another, is not
    reported again; an unreachable ledger is one `ledger-unreachable` finding and no miss."""
    def ran(job: str, session: str) -> dict | None:
        return runrecord.read(state_dir, job, session, book)

    # A fire ahead has nothing in the ledger but when run by hand ahead of its timer: each
    # job's ledger is listed once rather than a walk to each of 10,000 keys after a sync.
    ahead_ran = ran if book is not None else recordcache.Records(state_dir, now).read
    held = _Holds(config, state_dir, book)
    upcoming: list[dict] = []
    ahead = False
    # fire_utc is ISO UTC to the second: compared as text, most fires are never parsed
    stamp, last = iso(now), iso(until) if until is not None else None
    try:
        for entry in fires:
            if entry["job"] not in jobs:  # a job removed from the config since: nothing to expect
                continue
            fire = entry["fire_utc"]
            if fire <= stamp and held(entry):
                continue  # held by `market-timers pause` (pause_on_failure, halt): not a miss
            periodic = bool(entry.get("every_sec"))
            if periodic:  # a periodic job: judged by its slots (this node's slot records)
                slots.check_session(config, entry, now, watch, state_dir, result, alert,
                                    seen)
            if fire > stamp:
                ahead = True
                # A (job, session) that already ran (`market-timers run` ahead of its timer) has
                # no timer on purpose: sync withdrew it.
                if (last is None or fire <= last) and \
                        ahead_ran(entry["job"], entry["session"]) is None:
                    upcoming.append(entry)
                continue
            due = deadline(entry, watch.slack_sec)
            if not periodic and due < now and ran(entry["job"], entry["session"]) is None:
                finding = findings.missed(entry, due, now, watch)
                if book is not None and finding.key not in seen \
                        and not book.note_miss(Key(entry["job"], entry["session"])):
                    log.info("deadman: %s %s did not run; another node has reported it",
                             entry["job"], entry["session"],
                             extra=journal.about(entry["job"], entry["session"]))
                    seen[finding.key] = iso(now)  # not ours to report: never again
                result.findings.append(finding)
    except DatabaseError as e:
        result.findings[:] = [findings.unreachable(config, e)]
        result.errors.append(f"the cluster run ledger cannot be reached: {e}")
        # The timers can still be checked (what this node has not run locally).
        later = [e for e in fires if e["job"] in jobs and e["fire_utc"] > stamp]
        ahead = bool(later)
        upcoming = [e for e in later if (last is None or e["fire_utc"] <= last)
                    and runrecord.read(state_dir, e["job"], e["session"]) is None]
    return upcoming, ahead


def _sync_running(state_dir: Path) -> bool:
    """True while sync holds its lock (it starts timers with --no-block: let them settle)."""
    try:
        fd = safefs.open_file(state_dir / "sync.lock", os.O_RDONLY | os.O_NONBLOCK, base=state_dir)
    except OSError:
        return False
    try:
        with atomicfile.flock(fd, exclusive=False, wait=False) as held:
            return not held
    except OSError:
        return True


# CLI --------------------------------------------------------------------------------------------

def command(config, now: datetime | None = None) -> int:
    """`market-timers deadman`: 0 when the pass could look at everything (whatever it found)."""
    journal.setup()
    now = now or utcnow()
    try:  # a broken live config is a critical alert of its own (once per content)
        announce(config, now=lambda: now)
    except Exception:
        log.exception("deadman: could not announce the broken config")
    result = run_pass(config, now)
    for f in result.new:
        log.error("deadman: %s", f.text, extra=journal.about(f.job, f.session))
    for e in result.errors:
        log.error("deadman: %s", e)
    log.info("deadman: %d open finding(s), %d new, heartbeat %s", len(result.findings),
             len(result.new), result.ping or "off")
    statuspage.refresh(config, now)  # <state_dir>/status.html: a view, never fails the pass
    return 1 if result.errors else 0
