"""What happened to a run, from systemd's MONITOR_* variables and the runner's exit codes.

MONITOR_SERVICE_RESULT is the unit's Result: `exit-code` (then MONITOR_EXIT_STATUS is the status:
170 stale start, 171 overlap skip, 173 already ran, 175 ledger unreachable 176 requires unmet, 177
paused, 178 halted and 179 clock skew come from the runner, 172 is a runner error,
anything else is the job's own), `signal` / `core-dump` (killed: MONITOR_EXIT_STATUS is the signal name),
`watchdog` (hang: killed with SIGABRT), `timeout` (RuntimeMaxSec), `oom-kill`, and a few
start-up failures. A success handler still checks the status in case 170/171 were declared
SuccessExitStatus=.
"""

from __future__ import annotations

from market_timers.contracts import exitcodes

FAILURE_KINDS = ("failed", "killed", "watchdog", "timeout", "stale-start", "runner-error",
                 "ledger-unreachable", "clock-skew")

TITLES = {
    "failed": "{job} failed with exit status {status}",
    "killed": "{job} was killed by signal {status}",
    "watchdog": "{job} hung: killed by the watchdog",
    "timeout": "{job} ran past its time limit and was stopped",
    "stale-start": "{job} started too late and did not run (stale start)",
    "overlap-skipped": "{job} skipped: the previous run still holds its lock",
    "runner-error": "{job} could not be started by the runner",
    "already-ran": "{job} already ran for session {session}: this second start was refused",
    "ledger-unreachable": "{job} did not run for session {session}: the cluster ledger "
                          "(PostgreSQL) cannot be reached (on_db_unreachable = skip)",
    "clock-skew": "{job} did not run for session {session} on this node: its clock disagrees "
                  "with the cluster ledger's (max_clock_skew_ms)",
    "requires-unmet": "{job} did not run for session {session}: a job it requires did not "
                      "succeed",
    "paused": "{job} is paused: session {session} did not run",
    "halted": "{job} is halted (market-timers halt): session {session} did not run",
    "missed": "{job} did not run for session {session}",
    "not-scheduled": "{job}: no timer is scheduled for session {session}",
    "recovery": "{job} recovered: session {session} ran fine",
    "calendar-changed": "calendar changed",
}


def classify(result: str, exit_code: str, exit_status: str, success: bool = False) -> str:
    """One of FAILURE_KINDS (clock-skew among them), "overlap-skipped", "already-ran", "requires-unmet", "paused",
    "halted", or "ok"."""
    status = exit_status.strip()
    if status.isdigit():
        code = int(status)
        if code == exitcodes.STALE_START:
            return "stale-start"
        if code == exitcodes.OVERLAP_SKIPPED:
            return "overlap-skipped"
        if code == exitcodes.RUNNER_ERROR:
            return "runner-error"
        if code == exitcodes.ALREADY_RAN:
            return "already-ran"
        if code == exitcodes.LEDGER_UNREACHABLE:
            return "ledger-unreachable"
        if code == exitcodes.REQUIRES_UNMET:
            return "requires-unmet"
        if code == exitcodes.PAUSED:
            return "paused"
        if code == exitcodes.HALTED:
            return "halted"
        if code == exitcodes.CLOCK_SKEW:
            return "clock-skew"
    if success or result == "success":
        return "ok"
    if result == "watchdog":
        return "watchdog"
    if result == "timeout":
        return "timeout"
    if result in ("signal", "core-dump", "oom-kill") or exit_code in ("killed", "dumped"):
        return "killed"
    if result in ("resources", "start-limit-hit", "exec-condition"):
        return "runner-error"
    return "failed"


def title(kind: str, job: str, session: str = "", status: str = "", result: str = "") -> str:
    if kind == "failed" and not status:
        return f"{job or '?'} failed"
    if kind == "killed" and result == "oom-kill":
        return f"{job} was killed by the OOM killer"
    return TITLES.get(kind, "{job}: " + kind).format(job=job or "?", session=session or "?",
                                                     status=status or "?")


_RUNNER_EXITS = {exitcodes.STALE_START: "stale start", exitcodes.OVERLAP_SKIPPED: "overlap skipped",
                 exitcodes.RUNNER_ERROR: "runner error", exitcodes.ALREADY_RAN: "already ran",
                 exitcodes.LEDGER_UNREACHABLE: "ledger unreachable",
                 exitcodes.REQUIRES_UNMET: "requires unmet", exitcodes.PAUSED: "paused",
                 exitcodes.HALTED: "halted", exitcodes.CLOCK_SKEW: "clock skew"}


def result_text(result: str, exit_status: str | None) -> str:
    """A run's systemd Result in words for a person (`status`): `exit-code` and status 3 ->
    `failed (exit 3)`; anything that is not a systemd Result of a failure is returned as it is
    (success, running, missed...)."""
    status = str(exit_status or "").strip()
    if result == "exit-code":
        if status.isdigit() and int(status) in _RUNNER_EXITS:
            return f"{_RUNNER_EXITS[int(status)]} (exit {status})"
        return f"failed (exit {status})" if status else "failed"
    signal = f"signal {status}" if status else "a signal"
    return {"signal": f"killed ({signal})",
            "core-dump": f"killed ({signal}, core dumped)",
            "oom-kill": "killed (out of memory)",
            "watchdog": "hung (killed by the watchdog)",
            "timeout": "timed out (past its time limit)",
            "resources": "not started (resources: see its journal)",
            "start-limit-hit": "not started (start limit hit)",
            "exec-condition": "not started (its condition failed)"}.get(result, result)
