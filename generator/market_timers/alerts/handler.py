"""OnFailure= / OnSuccess= entry points (market-alert-failure@.service, market-alert-success@.service).

The handler gets the job unit's name as %i and MONITOR_* in its environment (only when exactly
one unit triggered it, hence two templates). The job's context comes from the unit's own
Environment= (`systemctl show`), with the unit name `market-<job>@<session>-<HHMMSS>.service` as
the fallback; the journal excerpt is that invocation's only (`_SYSTEMD_INVOCATION_ID`).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable

from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.skipped_slots import on_handler
from market_timers.contracts import environment, exitcodes, unitname
from market_timers.contracts.outcomes import BY_NAME, FAILURE_KINDS, classify, ledger_refusal_title
from market_timers.contracts.outcomes import title as run_title
from market_timers.ledger import DatabaseError, runrecord
from market_timers.ledger.pauses import paused
from market_timers.runner.slotrecords import read_slots

log = logging.getLogger("market_timers.alerts")

SHOW_PROPS = ("Environment", "ExecMainStartTimestampMonotonic", "ExecMainExitTimestampMonotonic",
              "SubState", "InvocationID")


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def unit_context(unit: str, run: Callable[[list[str]], str] = _run) -> dict:
    """MARKET_* values of the unit (from systemctl show, else its name) and the run's duration."""
    ctx: dict = {}
    name = unitname.parse(unit) if unit.endswith(".service") else None
    if name is not None and name.kind == unitname.FIRE:
        ctx.update(MARKET_JOB=name.job, MARKET_SESSION=name.session,
                   MARKET_SCHEDULED_UTC=name.scheduled_utc)
    out = run(["systemctl", "show", *[f"--property={p}" for p in SHOW_PROPS], "--", unit])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    try:
        words = shlex.split(props.get("Environment", ""))
    except ValueError:
        words = props.get("Environment", "").split()
    for word in words:
        name, sep, value = word.partition("=")
        if sep and name.startswith("MARKET_"):
            ctx[name] = value
    ctx["_substate"] = props.get("SubState", "")
    ctx["_invocation"] = props.get("InvocationID", "")
    try:
        start = int(props.get("ExecMainStartTimestampMonotonic", "0"))
        end = int(props.get("ExecMainExitTimestampMonotonic", "0"))
        if start and end >= start:
            ctx["duration"] = round((end - start) / 1e6, 3)
    except ValueError:
        pass
    return ctx


def journal_excerpt(invocation: str, lines: int, run: Callable[[list[str]], str] = _run) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", invocation or ""):
        return ""
    return run(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat",
                "-n", str(lines), "--no-pager"]).rstrip()


def retry_pending(info: dict, invocation: str) -> bool:
    """A failed attempt that systemd is about to restart (Restart=on-failure, a job's retries).

    systemd 252 does not run OnFailure= while a restart is pending; 254 and later do (unless
    RestartMode=direct, a key 252 does not know), so on Debian 13 each failed attempt would alert.
    The unit's own state tells: waiting to restart ("auto-restart"), or already running the next
    attempt (another invocation). Only a job with retries is ever restarted: any other job's
    failure always alerts."""
    if not info.get(environment.RETRIES, "0").strip("0"):
        return False
    if info.get("_substate") in ("auto-restart", "auto-restart-queued"):  # the latter: 254+
        return True
    current = info.get("_invocation", "")
    return bool(current and invocation and current != invocation
                and info.get("_substate") in ("start-pre", "start", "running"))


def handle(config, mode: str, unit: str, env: dict | None = None,
           run: Callable[[list[str]], str] = _run, now=None) -> int:
    env = os.environ if env is None else env
    if env.get("MONITOR_UNIT") and env["MONITOR_UNIT"] != unit:
        log.warning("handler for %s got MONITOR_UNIT=%s; using the latter", unit, env["MONITOR_UNIT"])
        unit = env["MONITOR_UNIT"]
    result = env.get("MONITOR_SERVICE_RESULT", "")
    exit_code = env.get("MONITOR_EXIT_CODE", "")
    status = env.get("MONITOR_EXIT_STATUS", "")
    invocation = env.get("MONITOR_INVOCATION_ID", "")
    info = unit_context(unit, run)
    job = info.get(environment.JOB) or unit.removesuffix(".service")
    session = info.get(environment.SESSION, "")
    kind = classify(result, exit_code, status, success=(mode == "success"),
                    ran=unitname.is_on_halt_unit(unit))  # on_halt: its status is its command's
    if (ran := recorded_run(config, job, session, invocation)) and tells(mode, result, status, ran):
        result, exit_code, status, kind = told(ran)  # the job's own end, as the runner saw it
    if info.get(environment.SLOT_EVERY_SEC) and on_handler(config, info, kind, now=now):
        return 0  # a periodic job: skipped slots are counted, not alerted
    details = {"slot": slot_of(config, info, invocation), "unit": unit, "invocation": invocation, "calendar": info.get(environment.CALENDAR),
               "scheduled": info.get(environment.SCHEDULED_UTC), "event": info.get(environment.EVENT),
               "status": status, "exit_code": exit_code,
               "result": ", ".join(x for x in (result, exit_code, status) if x),
               "duration": info.get("duration")}
    details = {k: v for k, v in details.items() if v not in (None, "")}
    if kind != "ok" and BY_NAME[kind].severity is None:  # halted: the halt's own alert said it
        log.info("%s: %s (exit %s): no alert of its own", unit, BY_NAME[kind].brief, status)
        return 0
    if kind == "ok":
        record_success(config, job=job, session=session, details=details, now=now, env=env)
        return 0
    if retry_pending(info, invocation):
        log.info("%s: attempt failed (%s); systemd restarts it (retries): no alert yet", unit,
                 ", ".join(x for x in (result, exit_code, status) if x))
        return 0
    title = stopped_by_halt(job, ran) or on_halt_killed(unit, job, status) or \
        ledger_refused(kind, job, session, info)
    if status == "174" or result == "start-limit-hit":  # the last of a job's retries failed
        if (last := final_failure(config, job, session)) is not None:
            kind, title, extra = last
            details.update(extra)
    if status == str(exitcodes.REQUIRES_UNMET) and (unmet := requires_unmet(config, job, session)):
        title, extra = unmet
        details.update(extra)
    if info.get(environment.PAUSE_ON_FAILURE) and kind in FAILURE_KINDS:
        if (held := failure_pause(config, job, info)) is not None:
            title = (title or run_title(kind, job, session, status, result)) + held
            details["paused"] = held.removeprefix("; ")
    if unit in unitname.PACKAGE_SERVICES and not info.get(environment.JOB):
        title = (f"{unit} failed ({details.get('result') or kind}): a part of market-timers "
                 f"itself is not working; see `systemctl status {unit}`")
    cfg = getattr(getattr(config, "cfg", None) or getattr(config, "alerts", None),
                  "journal_lines", 20)
    excerpt = journal_excerpt(invocation, cfg, run)
    if excerpt:
        details["journal"] = excerpt
    raise_alert(config, kind=kind, job=job, session=session, details=details, title=title,
                job_severity=info.get(environment.SEVERITY), now=now, env=env)
    return 0


def slot_of(config, info: dict, invocation: str) -> str:
    """The slot (UTC) this invocation of a periodic job ran, from the slot records the runner
    wrote ("" when none names it, or not a periodic job): part of the incident's identity
    (alerts/incidents.py)."""
    state_dir = info.get(environment.STATE_DIR) or getattr(config, "state_dir", None)
    job, session = info.get(environment.JOB), info.get(environment.SESSION)
    if not info.get(environment.SLOT_EVERY_SEC) or not (state_dir and job and session
                                                         and invocation):
        return ""
    for slot, record in read_slots(state_dir, job, session).items():
        if record.get("invocation") == invocation:
            return slot
    return ""


def recorded_run(config, job: str, session: str, invocation: str) -> dict | None:
    """The job's run in this invocation as the record step wrote it (the runner's account of its
    end: exited N, killed by S), or None when the runner refused the start (its exit status is
    then the runner's) or nothing was recorded (told from MONITOR_* alone, as before)."""
    state_dir = getattr(config, "state_dir", None)
    if not state_dir or not session or not invocation:
        return None
    book = runrecord.cluster_book(config)
    try:
        return runrecord.job_run_of(state_dir, job, session, invocation, book=book)
    except DatabaseError:  # the cluster ledger is unreachable: this node's local ledger
        return runrecord.job_run_of(state_dir, job, session, invocation)
    finally:
        if book is not None:
            book.close()


def tells(mode: str, result: str, status: str, ran: dict) -> bool:
    """Whether the recorded run, not systemd's view, says how this run ended. Not for the end of
    the retries (174: final_failure reads the attempts); and for OnSuccess= only a death by a
    signal systemd counts as clean: systemd 252 also triggers OnSuccess= when Restart= restarts
    a failed attempt, under the same invocation id, and a retry follows that failure."""
    if status == str(exitcodes.RETRIES_OVER) or result == "start-limit-hit":
        return False
    return mode != "success" or ran.get("result") in ("signal", "core-dump")


def told(ran: dict) -> tuple[str, str, str, str]:
    """(result, exit code, exit status, kind) of the job's run as recorded: its status is the
    job's own, never read as one of the runner's refusals."""
    result, code, status = (str(ran.get(k) or "") for k in ("result", "exit_code", "exit_status"))
    return result, code, status, classify(result, code, status, success=(result == "success"),
                                          ran=True)


def stopped_by_halt(job: str, ran: dict | None) -> str | None:
    """The title of a run that `market-timers halt` stopped (the record step says so)."""
    if not ran or not ran.get("stopped_by_halt"):
        return None
    return f"{job} was stopped by market-timers halt ({ran['stopped_by_halt']})"


def on_halt_killed(unit: str, job: str, status: str) -> str | None:
    """The title of an on_halt killed by SIGTERM (a stop, a kill after `halt`'s wait): its
    supervisor's exit 128 + the signal (runner/supervisor.py) read back as the signal."""
    signalled = exitcodes.supervised_signal(status) if unitname.is_on_halt_unit(unit) else None
    return f"{job} was {signalled}" if signalled else None


def ledger_refused(kind: str, job: str, session: str, info: dict) -> str | None:
    """A refusal 175's title, true of its job (an order job, on_db_unreachable: the unit's)."""
    if kind != "ledger-unreachable":
        return None
    return ledger_refusal_title(job, session, bool(info.get(environment.ORDERS)),
                                info.get(environment.ON_DB_UNREACHABLE, "skip"))


def failure_pause(config, job: str, info: dict) -> str | None:
    """What the failure alert of a `pause_on_failure` job adds: its lock group is paused, and
    how to resume it (None when the record step did not pause it: a refused start)."""
    state_dir = getattr(config, "state_dir", None)
    group = info.get(environment.LOCK_GROUP) or job
    book = runrecord.cluster_book(config)  # in a cluster the failure pause is the ledger's
    try:
        held = paused(str(state_dir), job, group, "0000-00-00", book=book) if state_dir else None
    except DatabaseError:
        held = paused(str(state_dir), job, group, "0000-00-00") if state_dir else None
    finally:
        if book is not None:
            book.close()
    if held is None or held.get("by") != "pause_on_failure":
        return None
    return (f"; lock group {group} is paused (pause_on_failure): its later sessions do not "
            f"run until {held['resume']}")


def requires_unmet(config, job: str, session: str) -> tuple[str, dict] | None:
    """(title, details) of a start refused by `requires` (176), from the refusal the runner noted:
    which upstream, in which state, and the command that runs the job once it has succeeded."""
    state_dir = getattr(config, "state_dir", None)
    if not state_dir or not session:
        return None
    book = runrecord.cluster_book(config)
    try:
        record = runrecord.read(state_dir, job, session, book=book)
    except DatabaseError:  # the cluster ledger is unreachable: this node's local ledger
        record = runrecord.read(state_dir, job, session)
    finally:
        if book is not None:
            book.close()
    if not record or record.get("refused") != "requires-unmet" or not record.get("upstream"):
        return None
    upstream, state = record["upstream"], record.get("upstream_state", "?")
    return (f"{job} did not run for session {session}: it requires {upstream}, which did not "
            f"succeed: {state}", {"upstream": upstream, "upstream_state": state,
                         "to run it": f"once {upstream} has succeeded: market-timers run {job} "
                                      f"--session {session}"})


def final_failure(config, job: str, session: str) -> tuple[str, str, dict] | None:
    """(kind, title, details) of a job whose retries are over, from its run record (which keeps
    the last attempt's own result); None when there is no record to tell."""
    state_dir = getattr(config, "state_dir", None)
    record = runrecord.read(state_dir, job, session) if state_dir and session else None
    if not record or not record.get("result"):
        return None
    attempts = int(record.get("attempt") or record.get("attempts") or 1)
    result, code = str(record.get("result") or ""), str(record.get("exit_code") or "")
    status = str(record.get("exit_status") or "")
    kind = classify(result, code, status, ran="attempt" in record and not record.get("refused"))
    if kind == "ok":
        return None
    head = run_title(kind, job, session, status, result)
    return kind, f"{head} after {attempts} attempt{'s' if attempts != 1 else ''}", {
        "attempts": attempts, "status": status, "exit_code": code,
        "result": ", ".join(x for x in (result, code, status) if x) + f" (attempt {attempts})"}
