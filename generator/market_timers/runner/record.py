"""`market-timers-run --record` (ExecStopPost=): how the attempt (or the refusal) ended, in the run
ledger, and the retry marker for the next start (the metrics follow: run.py). Off the hot path:
the job has ended.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

from market_timers import ledger
from market_timers.contracts import environment, slotcount
from market_timers.contracts.slotcount import SlotCount
from market_timers.ledger import DatabaseError
from market_timers.runner.nice import job_nice, set_nice
from market_timers.runner.retry import plan_retry
from market_timers.runner.start import WARNING, local_ledger, log, scheduled_instant


def record(env: dict) -> int:
    """ExecStopPost=: record in the ledger how this invocation's attempt (or refusal) ended."""
    try:
        return _record(env)
    finally:
        if env.get(environment.LEDGER) == "postgresql":  # the start's hand-off: used, removed
            from market_timers.ledger.postgresql import drop_hand_off

            drop_hand_off(env)


def leave_end(env: dict, unit: str) -> None:
    """The end record of this invocation for the alert handler (contracts/endrecord.py), when
    the unit names itself (`--record %n`: the units of render.py's job_units, whose OnFailure=/
    OnSuccess= it replaces); a unit that keeps its own OnFailure= passes no name."""
    if not unit:
        return
    from market_timers.contracts import endrecord

    try:
        endrecord.write(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, unit, env)
    except OSError as e:  # the dead-man finds the failed unit with no record (watch/endsweep.py)
        log(WARNING, f"cannot leave the end record of {unit} for the alert handler: {e}")


def _record(env: dict) -> int:
    job = env.get(environment.JOB)
    if not job:
        return 0
    if env.get(environment.LEAD_SEC):
        set_nice(job_nice(env))  # the unit's Nice=-10 was for the wait, not for this step
        _drop_capabilities()
    now = datetime.now(UTC)
    ending = take_ending(env)  # read first: removed whatever follows
    if env.get(environment.SLOT_EVERY_SEC):  # the slot this invocation judged
        return complete_slot(env, env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR,
                             job, now, ending)
    try:
        session = env.get(environment.SESSION) or scheduled_instant(env, now).date().isoformat()
        key = ledger.Key(job, session, env.get(environment.SLOT, ""))
        book = ledger.open_ledger(env) if not _ran_locally(env, key) else local_ledger(env)
        ended = how_it_ended(env, ending)
        book.finish(key, env.get("INVOCATION_ID"), dict(
            ended, finished_utc=now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            **_stopped_by_halt(ended, job, env, book)))
        if env.get(environment.RETRIES, "0") != "0":  # retries.py: the marker for the next start
            attempts = book.attempts(key)
            latest = attempts[-1] if attempts else {}
            if latest.get("invocation") == env.get("INVOCATION_ID"):  # this start ran the job
                plan_retry(env, env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, job,
                           session, int(latest.get("attempt") or 1), now)
        if env.get(environment.PAUSE_ON_FAILURE) and ended["result"] != "success":
            _pause_on_failure(env, book, key, now)
    except (OSError, ValueError, KeyError, DatabaseError) as e:
        log(WARNING, f"cannot record how the run ended in the run ledger: {e}")
    return 0


def take_ending(env: dict) -> list[str]:
    """The runner's own account of how this invocation ended (start.py note_ending), read and
    removed: ["refused", KIND], ["ran"], ["exited", N] or ["killed", SIG(, "stop")]; [] when
    there is none (a runner older than this, or one killed before it could write)."""
    from market_timers.runner.start import ENDINGS

    invocation = env.get("INVOCATION_ID") or ""
    if not invocation.isalnum():
        return []
    path = os.path.join(env.get(environment.LOCK_DIR, environment.DEFAULT_RUNTIME_DIR), ENDINGS,
                        invocation)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        text = os.read(fd, 256).decode(errors="replace")
    finally:
        os.close(fd)
    try:
        os.unlink(path)
    except OSError:
        pass
    return text.split()


def how_it_ended(env: dict, ending: list[str]) -> dict:
    """The run's end as the ledger records it: systemd's $SERVICE_RESULT, $EXIT_CODE and
    $EXIT_STATUS, where the runner's account (`ending`, start.py note_ending) knows better. A
    job killed by SIGTERM (SIGINT, SIGHUP, SIGPIPE) is `signal`, never `success`: the supervisor
    exits 128 + the signal rather than die of it (jobuser.py), and a job exec'd in place died of
    it, which systemd calls a success. `refused`: the runner refused the start (its kind), not
    the job's own exit 17x; `stopped`: the unit was stopped (systemd signalled the runner too)."""
    fields = {"result": env.get("SERVICE_RESULT"), "exit_code": env.get("EXIT_CODE"),
              "exit_status": env.get("EXIT_STATUS")}
    verb = ending[0] if ending else ""
    if verb == "refused" and len(ending) > 1:
        fields["refused"] = ending[1]
    elif verb == "killed" and len(ending) > 1:
        if fields["result"] in ("success", "exit-code"):  # not watchdog, timeout, oom-kill...
            fields.update(result="signal", exit_code="killed", exit_status=ending[1])
            if "stop" in ending[2:]:
                fields["stopped"] = "the unit was stopped"
    elif verb == "ran" and fields["exit_code"] in ("killed", "dumped") and \
            fields["result"] == "success":
        fields["result"] = "signal"
    return fields


def _stopped_by_halt(ended: dict, job: str, env: dict, book=None) -> dict:
    """A run killed by a signal while a halt covers its job: `market-timers halt` stopped it,
    so the record says so: stopped_by_halt."""
    if ended.get("exit_code") not in ("killed", "dumped"):
        return {}
    from market_timers.ledger.halts import halted

    try:
        held = halted(env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR, job,
                      env.get(environment.LOCK_GROUP, job), bool(env.get(environment.ORDERS)),
                      book=book)  # in a cluster, the ledger's halts: a halt made on any node
    except DatabaseError:
        held = None
    return {"stopped_by_halt": f"{held['what']}: {held.get('reason', '')}"} if held else {}


def _pause_on_failure(env: dict, book, key, now: datetime) -> None:
    """`pause_on_failure`: the job ran in this invocation and failed (a refused start did not
    run, and a failure with a retry to come is not the last): its lock group is paused until
    `market-timers resume --group` (ledger/pauses.py)."""
    from market_timers.ledger.pauses import write_failure_pause
    from market_timers.runner.retry import marker_path

    attempts = book.attempts(key)
    latest = attempts[-1] if attempts else {}
    if latest.get("invocation") != env.get("INVOCATION_ID"):
        return  # this start was refused: nothing ran, nothing failed
    state_dir = env.get(environment.STATE_DIR) or ledger.DEFAULT_STATE_DIR
    if env.get(environment.RETRIES, "0") != "0":
        try:
            with open(marker_path(state_dir, key.job, key.session)) as f:
                if f.read().strip() != "over":
                    return  # systemd retries it: not the last failure
        except FileNotFoundError:
            pass
    group = env.get(environment.LOCK_GROUP, key.job)
    status = env.get("EXIT_STATUS") or env.get("SERVICE_RESULT") or "?"
    fields = {
        "by": "pause_on_failure", "since": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "host": os.uname().nodename, "job": key.job, "session": key.session,
        "note": f"{key.job} failed in session {key.session} ({status}); pause_on_failure"}
    if book.pauses_everywhere:  # the cluster ledger: the pause holds every node
        try:
            book.set_pause("failure", group, fields)
        except DatabaseError as e:
            log(WARNING, f"pause_on_failure: cannot record the pause in the cluster ledger ({e});"
                         " it holds this node only")
            write_failure_pause(state_dir, group, fields)
    else:
        write_failure_pause(state_dir, group, fields)
    log(WARNING, f"pause_on_failure: lock group {group} is paused after this failure of "
                 f"{key.job}; its later sessions do not run until: market-timers resume --group "
                 f"{group}")


def complete_slot(env: dict, state_dir: str, job: str, now: datetime,
                  ending: list[str] | None = None) -> int:
    """`market-timers-run --record` for a periodic job: complete the slot this invocation judged
    (the runner left a pointer named by $INVOCATION_ID), then record the slots skipped meanwhile."""
    from market_timers.runner.slotaccount import account
    from market_timers.runner.slotclock import PeriodicSlots, pointer_path
    from market_timers.runner.slotrecords import read_slot, update_slot

    session = env.get(environment.SESSION, "")
    invocation = env.get("INVOCATION_ID", "")
    try:
        schedule = PeriodicSlots.from_env(env)
        if invocation.isalnum() and session:
            pointer = pointer_path(state_dir, job, session, invocation)
            try:
                key = Path(pointer).read_text().strip()
            except FileNotFoundError:
                key = ""  # a duplicate start (173) or no record could be written
            if key:
                previous = read_slot(state_dir, job, key) or {}
                fields = dict(how_it_ended(env, ending or []),
                              finished_utc=now.isoformat(timespec="milliseconds"))
                _finish_in_ledger(env, job, key, invocation, fields)
                if "started_mono" in previous:
                    fields["duration_sec"] = round(time.monotonic() - previous["started_mono"], 3)
                update_slot(state_dir, job, key, **fields)
                os.unlink(pointer)
        if schedule is not None and session:
            summary = account(state_dir, job, session, schedule,
                              int(env.get(environment.GRACE_SEC, "0")), now)
            # the count the alert handler systemd runs next reads (it never counts itself)
            slotcount.write(ledger.slot_records_dir(state_dir, job, session),
                            SlotCount.of(summary, job))
    except (OSError, ValueError, KeyError) as e:
        print(f"market-timers-run: cannot complete the slot record: {e}", flush=True)
    return 0


def _finish_in_ledger(env: dict, job: str, key: str, invocation: str, fields: dict) -> None:
    """How the slot's attempt (or refused start) ended, in the run ledger too."""
    session, _, slot = key.partition("/")
    try:
        ledger.open_ledger(env).finish(ledger.Key(job, session, slot), invocation, {
            k: v.replace("+00:00", "Z") if k == "finished_utc" else v
            for k, v in fields.items()})
    except (OSError, ValueError, DatabaseError) as e:  # e.g. the DSN credential unreadable here
        print(f"market-timers-run: cannot record how the slot's run ended in the run ledger: "
              f"{e}", flush=True)


def counted_in_metrics(env: dict) -> bool:
    """Whether the metrics follow this record step: a job's run, not a periodic job's slot (its
    slot records are counted by the metrics' own pass)."""
    return bool(env.get(environment.JOB)) and not env.get(environment.SLOT_EVERY_SEC)


def _ran_locally(env: dict, key) -> bool:
    """A cluster node's start that fell back to the local ledger (on_db_unreachable = run)."""
    if (env.get(environment.LEDGER) or "local") == "local":
        return False
    invocation = env.get("INVOCATION_ID")
    return any(a.get("invocation") == invocation for a in local_ledger(env).attempts(key))


def _drop_capabilities() -> None:
    """A pre-fired unit grants CAP_SYS_NICE for the run's escort (instant_escort.py); this step
    has no use for it, so it drops it first. Not as root: root's record step needs its
    capabilities (a root process keeps only what it is given back by an exec)."""
    from market_timers.runner import realtime as instant_escort

    if os.geteuid() != 0 and instant_escort.has_cap_sys_nice():
        instant_escort.drop_capabilities("the record step")
