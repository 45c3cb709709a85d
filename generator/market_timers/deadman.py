"""`market-timers deadman`: compare the plan with what actually ran (market-deadman.timer, every minute).

One pass reads `<state_dir>/plan.json` (every fire sync planned while it was still ahead: it comes
from the exchange calendar, so a holiday has no entry and an early close has its moved instant),
the run records and `systemctl show` of the upcoming timers, and finds:

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

Each pass then pings the external heartbeat if `[watch] ping = true`: the URL from the credential,
or its `/fail` variant when the pass found something new or could not do its job. The URL is a
secret: it is never logged. A failed ping is logged and never fails the pass.

The clock is injected (`now`); nothing here sleeps.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from market_timers import atomicfile  # absolute: this module is moving into watch/

from . import logsetup, metrics, planfile, runrecord, safefs
from .instants import iso, parse_iso
from .ledger import Key
from .ledger.errors import DatabaseError
from .systemctl import Systemctl
from .watch_alert import send_alert
from .watch_config import WatchConfig, watch_of

REFRESH_OVERDUE = timedelta(hours=26)  # market-refresh.timer runs daily (and at boot)
log = logging.getLogger("market_timers.watch")

PLAN_FILE = planfile.FILE
STATE_FILE = "deadman.json"
UNREACHABLE_KEY = "ledger-unreachable"


@dataclass(frozen=True)
class Finding:
    kind: str  # "missed" | "not-scheduled" | "ledger-unreachable"
    key: str  # what deadman.json remembers as reported
    job: str
    session: str
    text: str
    severity: str = "critical"  # the job's severity (the alert layer may lower it by its rules)


@dataclass
class PassResult:
    findings: list[Finding] = field(default_factory=list)  # everything wrong right now
    new: list[Finding] = field(default_factory=list)  # reported (alerted) by this pass
    errors: list[str] = field(default_factory=list)  # the pass could not check something
    ping: str | None = None  # "ok" | "fail" | None (off, no URL)
    ping_delivered: bool | None = None

    @property
    def failed(self) -> bool:
        """What the heartbeat reports as /fail: a new problem, or a pass that could not look."""
        return bool(self.new or self.errors)


def read_plan(state_dir: Path) -> dict | None:
    """plan.json as written by sync (planfile.read), or None when sync has never run."""
    doc = planfile.read(state_dir)
    return None if doc is None else doc.to_json()


def deadline(entry: dict, slack_sec: int) -> datetime:
    """When a planned run with no record becomes "missed": instant + grace + timeout + slack."""
    return parse_iso(entry["fire_utc"]) + timedelta(
        seconds=int(entry.get("grace_sec", 0)) + int(entry.get("timeout_sec", 0)) + slack_sec)


def timer_state(props: dict[str, str]) -> str:
    """waiting | elapsed | missing | inactive | unknown | <LoadState>/<ActiveState>/<SubState>."""
    load, active, sub = (props.get(k, "") for k in ("LoadState", "ActiveState", "SubState"))
    if not load:
        return "unknown"
    if load == "not-found":
        return "missing"
    if load == "loaded" and active == "active":
        return sub if sub in ("waiting", "elapsed") else f"active/{sub or '?'}"
    if load == "loaded" and active in ("inactive", "failed"):
        return active
    return f"{load}/{active or '?'}/{sub or '?'}"


def run_pass(config, now: datetime, *, systemctl: Systemctl | None = None,
             alert=send_alert, env: dict | None = None, ping: bool = True) -> PassResult:
    """One dead-man pass. Alerts go through `alert` (tests record them); never raises for them."""
    watch = watch_of(config)
    systemctl = systemctl or Systemctl()
    state_dir = Path(config.state_dir)
    result = PassResult()
    try:
        _check(config, watch, now, systemctl, state_dir, result, alert)
    except Exception as e:  # a broken pass still pings /fail and reports in the journal
        log.exception("deadman: the pass failed")
        result.errors.append(f"the pass failed: {type(e).__name__}: {e}")
    for finding in result.new:
        try:
            alert(config, kind=finding.kind, key=finding.key, text=finding.text,
                  job=finding.job, session=finding.session, job_severity=finding.severity,
                  title=_title(finding), now=now)
        except Exception:  # the journal still has it (command() logs every new finding)
            log.exception("deadman: could not raise the %s alert %s", finding.kind, finding.key)
    if ping:
        _heartbeat(watch, result, env)
    metrics.after_deadman(config, now)
    return result


def _title(f: Finding) -> str:
    if f.kind == UNREACHABLE_KEY:
        return "the cluster run ledger cannot be reached: the deadman cannot tell what ran"
    if f.kind == "missed":
        return f"{f.job} did not run for session {f.session}"
    if f.job:
        return f"{f.job} is not scheduled for session {f.session}"
    return "no market timer is scheduled ahead"


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
    state = _load_state(state_dir)
    reported: dict[str, str] = state.setdefault("reported", {})
    jobs = {j.name for j in config.jobs}
    if getattr(config, "broken", None) is not None:  # degraded config: trust the last plan
        jobs |= {e["job"] for e in fires}

    book = runrecord.cluster_book(config)  # None: the local ledger only
    try:
        upcoming = _check_fires(config, watch, now, state_dir, fires, jobs, reported, book,
                                result, alert)
    finally:
        if book is not None:
            book.close()
    generated = parse_iso(plan["generated_utc"]) if plan.get("generated_utc") else None
    settling = generated is not None and now - generated < timedelta(seconds=watch.slack_sec)
    if settling or _sync_running(state_dir):
        log.info("deadman: a sync is running or has just finished; timers checked next pass")
    elif upcoming:
        units = [e["unit"] for e in upcoming]
        shown = systemctl.show(units, ["LoadState", "ActiveState", "SubState"])
        unknown = 0
        for entry in upcoming:
            what = timer_state(shown.get(entry["unit"], {}))
            if what == "unknown":
                unknown += 1
            elif what != "waiting":
                result.findings.append(_not_scheduled(entry, what))
        if unknown:
            result.errors.append(f"systemctl show told nothing about {unknown} timer(s): is "
                                 "systemd reachable over D-Bus?")
    elif session_jobs and (generated is None or now - generated > REFRESH_OVERDUE):
        # With a short horizon nothing may be ahead between the day's last fire and the next
        # daily refresh: that is only a problem once the refresh is overdue.
        since = plan.get("generated_utc", "?")
        result.findings.append(Finding(
            "not-scheduled", f"not-scheduled:nothing-ahead:{since}", "", "",
            f"No market timer is planned ahead: the last sync was at {since} and every fire it "
            "planned has passed. Is market-refresh.timer running? Check `systemctl status "
            "market-refresh.service` and run `market-timers sync`."))

    _prune_slot_records(config, state_dir, now)
    for finding in result.findings:
        if finding.key not in reported:
            result.new.append(finding)
            reported[finding.key] = iso(now)
    # Forget what plan.json forgot (past its retention), so deadman.json stays small; an outage
    # of the ledger is forgotten when it ends, so that the next one is reported again.
    live = {f"{e['job']}|{e['session']}" for e in fires}
    nothing_ahead = f"not-scheduled:nothing-ahead:{plan.get('generated_utc', '?')}"
    unreachable = any(f.key == UNREACHABLE_KEY for f in result.findings)
    state["reported"] = {k: v for k, v in reported.items()
                         if k == nothing_ahead or _pair(k) in live
                         or (k == UNREACHABLE_KEY and unreachable)}
    state["last_pass_utc"] = iso(now)
    _save_state(state_dir, state)


def _check_fires(config, watch: WatchConfig, now: datetime, state_dir: Path, fires: list[dict],
                 jobs: set[str], reported: dict[str, str], book, result: PassResult,
                 alert) -> list:
    """The misses (result.findings) and the upcoming fires that have not run, to check timers.

    With the cluster ledger (`book`): a miss already reported, by this node or another, is not
    reported again; an unreachable ledger is one `ledger-unreachable` finding and no miss."""
    def ran(entry: dict) -> dict | None:
        return runrecord.read(state_dir, entry["job"], entry["session"], book)

    upcoming: list[dict] = []
    try:
        for entry in fires:
            if entry["job"] not in jobs:  # a job removed from the config since: nothing to expect
                continue
            periodic = bool(entry.get("every_sec"))
            if periodic:  # a periodic job: judged by its slots (this node's slot records)
                _periodic(config, entry, now, watch, state_dir, result, alert)
            due = deadline(entry, watch.slack_sec)
            if parse_iso(entry["fire_utc"]) > now:
                # A (job, session) that already ran (`market-timers run` ahead of its timer) has
                # no timer on purpose: sync withdrew it.
                if ran(entry) is None:
                    upcoming.append(entry)
            elif not periodic and due < now and ran(entry) is None:
                finding = _missed(entry, due, now, watch)
                if book is not None and finding.key not in reported \
                        and not book.note_miss(Key(entry["job"], entry["session"])):
                    log.info("deadman: %s %s did not run; another node has reported it",
                             entry["job"], entry["session"])
                    reported[finding.key] = iso(now)  # not ours to report: never again
                result.findings.append(finding)
    except DatabaseError as e:
        result.findings[:] = [_unreachable(config, e)]
        result.errors.append(f"the cluster run ledger cannot be reached: {e}")
        # The timers can still be checked (what this node has not run locally).
        upcoming = [e for e in fires if parse_iso(e["fire_utc"]) > now and e["job"] in jobs
                    and runrecord.read(state_dir, e["job"], e["session"]) is None]
    return upcoming


def _unreachable(config, error: Exception) -> Finding:
    node = config.cluster.node
    return Finding(
        UNREACHABLE_KEY, UNREACHABLE_KEY, "", "",
        f"Node {node}: the cluster run ledger (PostgreSQL, credential "
        f"market-timers.cluster-dsn) cannot be reached ({error}). The deadman cannot tell which "
        "jobs ran on which node, so it reports no miss until the ledger is back; the runners "
        "follow [cluster] on_db_unreachable. Check the database and `market-timers cluster "
        "status`.")


def _periodic(config, entry: dict, now: datetime, watch: WatchConfig, state_dir: Path,
              result: PassResult, alert) -> None:
    """A periodic job's session: record the skipped slots, the session's one skip warning, and a
    finding when no slot has started for stall_after (or none at all in the session)."""
    from .slotclock import Schedule
    from .slotrecords import account, stall, warn_once

    schedule = Schedule.from_plan(entry)
    job = next((j for j in config.jobs if j.name == entry["job"]), None)
    periodic = getattr(job, "periodic", None)
    stall_after = periodic.stall_after if periodic else 5 * schedule.every
    grace = int(entry.get("grace_sec", 0))
    horizon = schedule.last + timedelta(seconds=max(stall_after, grace) + watch.slack_sec + 3600)
    if now < schedule.first or now > horizon:
        return
    summary = account(state_dir, entry["job"], entry["session"], schedule, grace, now)

    def raise_(cfg, **kw):  # send_alert has no `details`
        kw.pop("details", None)
        return alert(cfg, **kw)

    warn_once(config, entry["job"], entry["session"], summary, entry.get("severity"), state_dir,
              now=now, raise_alert=raise_)
    found = stall(entry, summary, stall_after, now, watch.slack_sec + grace)
    if found is None and not summary.ran and not summary.ahead \
            and now > schedule.last + timedelta(seconds=grace + watch.slack_sec):
        found = (f"missed:{entry['job']}:{entry['session']}",
                 f"{entry['job']} ({entry.get('calendar', '?')} {entry['session']}) ran none of "
                 f"its {summary.total} slots ({entry['first_utc']} .. {entry['last_utc']}).")
    if found is not None:  # a stall is critical whatever the job's own severity (which is for
        # its failures and skips); [alerts] overrides can still lower it for this job
        result.findings.append(Finding("missed", found[0], entry["job"], entry["session"],
                                       found[1], "critical"))


def _prune_slot_records(config, state_dir: Path, now: datetime) -> None:
    """Periodic jobs' slot records older than retention_days go (hundreds per session)."""
    from .slotrecords import prune

    before = (now - timedelta(days=config.retention_days + 1)).date().isoformat()
    for job in config.jobs:
        if getattr(job, "periodic", None) is not None:
            prune(state_dir, job.name, before)


def _pair(key: str) -> str:
    parts = key.split(":")
    return f"{parts[1]}|{parts[2]}" if len(parts) >= 3 else ""


def _missed(entry: dict, due: datetime, now: datetime, watch: WatchConfig) -> Finding:
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


def _not_scheduled(entry: dict, what: str) -> Finding:
    job, session = entry["job"], entry["session"]
    text = (f"{job} ({entry.get('calendar', '?')} {session}) is planned for {entry['fire_utc']} "
            f"but its timer {entry['unit']} is {what}, not waiting: it will not fire. Run "
            "`market-timers sync` (it starts missing timers) and check `systemctl status "
            f"{entry['unit']}`.")
    return Finding("not-scheduled", f"not-scheduled:{job}:{session}:{entry['unit']}", job,
                   session, text, entry.get("severity", "critical"))


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


def _load_state(state_dir: Path) -> dict:
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


def _save_state(state_dir: Path, state: dict) -> None:
    path = state_dir / STATE_FILE
    try:
        safefs.write_json(path, state, base=state_dir, sync=atomicfile.DURABLE)
    except OSError as e:
        # The alerts still go out (the alert layer's dedup window holds back repeats).
        log.error("deadman: cannot write %s: %s", path, e)


# External heartbeat -------------------------------------------------------------------------

def ping_url(watch: WatchConfig, env: dict | None = None) -> str | None:
    from .alerts.credentials import read_credential

    return read_credential(watch.ping_credential, env)


def _heartbeat(watch: WatchConfig, result: PassResult, env: dict | None) -> None:
    if not watch.ping:
        return
    url = ping_url(watch, env)
    if url is None:
        log.warning("deadman: [watch] ping is on but credential %s is not available "
                    "(LoadCredential=%s in market-deadman.service, file in /etc/credstore)",
                    watch.ping_credential, watch.ping_credential)
        result.errors.append("heartbeat credential missing")
        return
    result.ping = "fail" if result.failed else "ok"
    body = summary(result)
    result.ping_delivered = send_ping(url, fail=result.failed, body=body,
                                      timeout=watch.ping_timeout)


def summary(result: PassResult) -> str:
    lines = [f"{f.kind}: {f.job or '-'} {f.session or ''}".rstrip() for f in result.new]
    lines += [f"error: {e}" for e in result.errors]
    lines.append(f"{len(result.findings)} open finding(s), {len(result.new)} new")
    return "\n".join(lines)


def send_ping(url: str, *, fail: bool, body: str = "", timeout: float = 5.0) -> bool:
    """healthchecks.io style: POST to the URL, or to URL/fail, within `timeout` seconds in all.

    Never raises. Nothing derived from the URL is logged (it is a secret): neither the URL nor
    an exception text that could embed it (a control character in the URL used to put the
    whole URL into the journal through the exception text). A 3xx is not a ping received.
    """
    from .alerts.httppost import PostError, post

    target = url.rstrip("/") + "/fail" if fail else url
    what = " /fail" if fail else ""
    try:
        response = post(target, body.encode()[:10000],
                        {"User-Agent": "market-timers-deadman",
                         "Content-Type": "text/plain; charset=utf-8"}, timeout)
    except PostError as e:
        log.warning("deadman: heartbeat ping%s failed: %s", what, str(e).replace(url, "[url]"))
        return False
    except Exception as e:  # a bug must not fail the pass; its text could hold the URL
        log.warning("deadman: heartbeat ping%s failed: %s", what, type(e).__name__)
        return False
    if 200 <= response.status < 300:
        return True
    log.warning("deadman: heartbeat ping%s failed: the monitor answered HTTP %d%s", what,
                response.status, " (a redirect: not followed; configure the final URL)"
                if 300 <= response.status < 400 else "")
    return False


# CLI --------------------------------------------------------------------------------------------



def command(config, now: datetime | None = None) -> int:
    """`market-timers deadman`: 0 when the pass could look at everything (whatever it found)."""
    logsetup.setup()
    from .alerts.snapshot import announce
    from .plan import utcnow

    now = now or utcnow()
    try:  # a broken live config is a critical alert of its own (once per content)
        announce(config, now=lambda: now)
    except Exception:
        log.exception("deadman: could not announce the broken config")
    result = run_pass(config, now)
    for f in result.new:
        log.error("deadman: %s", f.text)
    for e in result.errors:
        log.error("deadman: %s", e)
    log.info("deadman: %d open finding(s), %d new, heartbeat %s", len(result.findings),
             len(result.new), result.ping or "off")
    return 1 if result.errors else 0
