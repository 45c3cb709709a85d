"""The runner: stale starts refused, one run per lock group, locks freed by the OS, exec in place."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_timers.contracts import exitcodes
from market_timers.ledger import runrecord

RUNNER = [sys.executable, "-m", "market_timers.run"]


def context(tmp_path: Path, scheduled: datetime | None = None, **extra) -> dict:
    scheduled = scheduled or datetime.now(UTC)
    env = dict(os.environ)
    env.update(MARKET_JOB="signal", MARKET_SESSION="2025-11-28", MARKET_CALENDAR="XNYS",
               MARKET_EVENT="close", MARKET_SCHEDULED_UTC=scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
               MARKET_GRACE_SEC="60", MARKET_LOCK_GROUP="orders",
               MARKET_LOCK_DIR=str(tmp_path / "run"), MARKET_STATE_DIR=str(tmp_path / "state"))
    env.pop("JOURNAL_STREAM", None)
    env.update(extra)
    return env


def run(env: dict, *command: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNNER, "--", *command], env=env, capture_output=True, text=True,
                          timeout=30, **kw)


@contextmanager
def running_job(tmp_path: Path, script: str, **extra):
    """A run of the runner whose job is `sh -c script`, after its first line of output."""
    proc = subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", script],
                            env=context(tmp_path, **extra), stdout=subprocess.PIPE, text=True)
    try:
        proc.first_line = proc.stdout.readline().strip()
        yield proc
    finally:
        proc.kill()
        proc.wait()


def record(tmp_path: Path, job: str = "signal", session: str = "2025-11-28") -> dict:
    """What status and the deadman read: the run ledger's record of (job, session)."""
    return runrecord.read(tmp_path / "state", job, session)


def test_start_later_than_grace_is_refused_with_the_stale_code(tmp_path):
    marker = tmp_path / "ran"
    env = context(tmp_path, datetime.now(UTC) - timedelta(seconds=75))
    proc = run(env, "/usr/bin/touch", str(marker))
    assert proc.returncode == exitcodes.STALE_START == 170
    assert not marker.exists()
    assert "stale start" in proc.stderr and "grace of 60 s" in proc.stderr
    assert record(tmp_path)["refused"] == "stale-start"


def test_start_within_grace_runs_the_job_with_its_context(tmp_path):
    env = context(tmp_path, datetime.now(UTC) - timedelta(seconds=30))
    proc = run(env, "/usr/bin/env")
    assert proc.returncode == 0, proc.stderr
    seen = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert seen["MARKET_JOB"] == "signal" and seen["MARKET_SESSION"] == "2025-11-28"
    assert seen["MARKET_CALENDAR"] == "XNYS" and seen["MARKET_EVENT"] == "close"
    assert seen["MARKET_SCHEDULED_UTC"] == env["MARKET_SCHEDULED_UTC"]
    assert seen["PYTHONFAULTHANDLER"] == "1"


def test_job_exit_status_passes_through(tmp_path):
    proc = run(context(tmp_path), "/bin/sh", "-c", "exit 3")
    assert proc.returncode == 3


def test_runner_pid_is_the_job_pid(tmp_path):
    """exec in place: the unit's main PID is the job (WatchdogSec= needs NotifyAccess=main)."""
    with running_job(tmp_path, "echo $$; sleep 5") as proc:
        assert int(proc.first_line) == proc.pid
        assert f"pid {proc.pid} " in (tmp_path / "run" / "locks" / "orders.lock").read_text()


def test_second_run_in_a_busy_lock_group_is_skipped_and_names_the_holder(tmp_path):
    with running_job(tmp_path, "echo go; sleep 10") as first:
        assert first.first_line == "go"  # holds the lock now
        marker = tmp_path / "second-ran"
        env = context(tmp_path, MARKET_JOB="closing-orders")
        proc = run(env, "/usr/bin/touch", str(marker))
        assert proc.returncode == exitcodes.OVERLAP_SKIPPED == 171
        assert not marker.exists()
        assert f"held by pid {first.pid} (job signal session 2025-11-28); its note: pid " \
            f"{first.pid} job signal session 2025-11-28 since" in proc.stderr
        assert "dropped, not queued" in proc.stderr
        assert record(tmp_path, "closing-orders")["refused"] == "overlap-skipped"


def test_lock_of_a_holder_killed_with_sigkill_is_freed(tmp_path):
    # `exec sleep`: a child would inherit the lock fd and keep the lock (under systemd the whole
    # cgroup is killed with the job, children included).
    with running_job(tmp_path, "echo go; exec sleep 30") as holder:
        assert holder.first_line == "go"
        other = context(tmp_path, MARKET_JOB="closing-orders")  # same lock group, another job
        assert run(other, "/bin/true").returncode == exitcodes.OVERLAP_SKIPPED
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert run(other, "/bin/true").returncode == 0


def test_different_lock_groups_run_side_by_side(tmp_path):
    with running_job(tmp_path, "echo go; sleep 10") as holder:
        assert holder.first_line == "go"
        proc = run(context(tmp_path, MARKET_JOB="quotes", MARKET_LOCK_GROUP="broker"), "/bin/true")
        assert proc.returncode == 0


def test_missing_program_is_a_runner_error(tmp_path):
    proc = run(context(tmp_path), "/nonexistent/job")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "cannot run /nonexistent/job" in proc.stderr
    assert record(tmp_path) is None  # no claim: once fixed, the session can still run once


def test_missing_context_is_a_runner_error(tmp_path):
    env = context(tmp_path)
    del env["MARKET_JOB"]
    assert run(env, "/bin/true").returncode == exitcodes.RUNNER_ERROR


def test_daily_job_is_judged_against_todays_utc_time(tmp_path):
    now = datetime.now(UTC)
    env = context(tmp_path, MARKET_DAILY_UTC=(now - timedelta(minutes=10)).strftime("%H:%M:%S"))
    del env["MARKET_SCHEDULED_UTC"]
    del env["MARKET_SESSION"]
    proc = run(env, "/bin/true")  # 10 min late with 60 s grace
    assert proc.returncode == exitcodes.STALE_START


def test_record_completes_the_run_with_how_the_service_ended(tmp_path):
    env = context(tmp_path)
    assert run(env, "/bin/true").returncode == 0
    env.update(SERVICE_RESULT="watchdog", EXIT_CODE="killed", EXIT_STATUS="ABRT")
    subprocess.run([*RUNNER[:-1], "market_timers.run", "--record"], env=env, check=True)
    rec = record(tmp_path)
    assert (rec["result"], rec["exit_code"], rec["exit_status"]) == ("watchdog", "killed", "ABRT")
    assert rec["scheduled_utc"] == env["MARKET_SCHEDULED_UTC"] and rec["duration_sec"] >= 0


# What a start has loaded when it execs the job: os.execve is replaced by a report of sys.modules.
AT_EXEC = """
import os, sys
def report(path, argv, env):
    print(" ".join(sorted(sys.modules)), flush=True)
    os._exit(0)
os.execve = report
from market_timers.run import main
sys.argv = ["market-timers-run", "--", "/bin/true"]
main()
"""
HEAVY = ("pandas", "numpy", "exchange_calendars", "jinja2", "json", "typing")
START = {"market_timers", "market_timers.run", "market_timers.runner",
         "market_timers.runner.gates",  # the gates, split from runner/__init__.py
         "market_timers.runner.start", "market_timers.runner.jobuser",
         "market_timers.runner.lockgroup",  # this host's flock of the lock group
         "market_timers.contracts",
         "market_timers.contracts.environment", "market_timers.contracts.exitcodes",
         "market_timers.contracts.outcomes",  # the outcome table: exitcodes.py reads it (~0.4 ms)
         "market_timers.ledger", "market_timers.ledger.local",
         # the ledger's parts, split from ledger/__init__.py and local.py (os only, as before)
         "market_timers.ledger.errors", "market_timers.ledger.fields",
         "market_timers.ledger.paths", "market_timers.ledger.localfiles",
         "market_timers.ledger.pauses",  # pause check: os and stat, a few stats per start
         "market_timers.ledger.halts"}  # halt check (after the lock): os, a few stats per start
PRE_FIRE = {"market_timers.runner.prefire", "market_timers.runner.nice",
            "market_timers.runner.realtime"}
SLOT = {"market_timers.runner.slotclock", "market_timers.files", "market_timers.files.flatjson"}


def loaded_at_exec(env: dict) -> set[str]:
    out = subprocess.run([sys.executable, "-c", AT_EXEC], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    return set(out.stdout.split())


def slot_context(tmp_path: Path) -> dict:
    now = datetime.now(UTC)
    z = "%Y-%m-%dT%H:%M:%SZ"
    return context(tmp_path, MARKET_SESSION=now.date().isoformat(), MARKET_SCHEDULED_UTC="",
                   MARKET_SLOT_FIRST_UTC=(now - timedelta(seconds=1)).strftime(z),
                   MARKET_SLOT_LAST_UTC=(now + timedelta(hours=1)).strftime(z),
                   MARKET_SLOT_EVERY_SEC="60", INVOCATION_ID="0123456789abcdef")


@pytest.mark.parametrize("kind", ["session job", "pre-fired", "periodic slot"])
def test_a_start_loads_only_its_own_modules_and_nothing_heavy(tmp_path, kind):
    """The hot path, up to the exec: no pandas, exchange_calendars, jinja2 or json, and of the
    package only what this kind of start needs (a module more is a decision: add it here)."""
    if kind == "pre-fired":  # its timer fired 2 s early: the wait is handed to exec-at
        env = context(tmp_path, datetime.now(UTC) + timedelta(seconds=1.5), MARKET_LEAD_SEC="2")
        want = START | PRE_FIRE
        if not os.access(Path(sys.executable).parent / "market-timers-exec-at", os.X_OK):
            want |= {"market_timers.runner.instant_wait"}  # the wait is done in Python then
    elif kind == "periodic slot":
        env, want = slot_context(tmp_path), START | SLOT
    else:
        env, want = context(tmp_path), START
    modules = loaded_at_exec(env)
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []
    assert {m for m in modules if m.startswith("market_timers")} == want


def test_the_jobs_library_imports_nothing_heavy():
    code = ("import sys, market_timers.jobnotify; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pandas', 'numpy', 'exchange_calendars', 'jinja2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_jobnotify_is_a_no_op_outside_systemd(monkeypatch):
    from market_timers import jobnotify

    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    jobnotify.ready()
    jobnotify.heartbeat()
    jobnotify.status("x")
    assert jobnotify.watchdog_interval() is None


def test_jobnotify_sends_to_the_notify_socket(tmp_path, monkeypatch):
    import socket

    from market_timers import jobnotify

    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setattr(jobnotify, "_notifier", None)
    jobnotify.ready()
    jobnotify.heartbeat()
    jobnotify.status("computing  weights")
    got = [sock.recv(256).decode() for _ in range(3)]
    sock.close()
    assert got == ["READY=1", "WATCHDOG=1", "STATUS=computing weights"]


def test_ledger_fields_survive_odd_characters(tmp_path):
    from market_timers import ledger

    fields = {"refused": 'a "quoted"\\ name\n=x', "late_sec": 1.5, "pid": 7, "result": None}
    text = ledger.format_fields(fields)
    assert len(text.splitlines()) == 3  # one line per field; None is left out
    assert ledger.parse_fields(text) == {k: v for k, v in fields.items() if v is not None}


def test_malformed_scheduled_instant_is_a_runner_error(tmp_path):
    proc = run(context(tmp_path, MARKET_SCHEDULED_UTC="2025-11-28 17:45"), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "MARKET_SCHEDULED_UTC='2025-11-28 17:45' is not YYYY-MM-DDTHH:MM:SSZ" in proc.stderr


# The run ledger (issue 10): exactly once per (job, session) ----------------------------------

def appender(tmp_path: Path) -> tuple[list[str], Path]:
    out = tmp_path / "orders-sent"
    return ["/bin/sh", "-c", f"echo sent >> {out}"], out


def test_second_start_of_a_session_exits_173_and_names_when_and_where_it_ran(tmp_path):
    command, out = appender(tmp_path)
    first = run(context(tmp_path), *command)
    assert first.returncode == 0, first.stderr
    # the same (job, session) again, e.g. its timer moved 5 min later by a config change
    second = run(context(tmp_path, MARKET_SCHEDULED_UTC=(datetime.now(UTC) + timedelta(
        seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")), *command)
    assert second.returncode == exitcodes.ALREADY_RAN == 173
    assert out.read_text() == "sent\n"
    assert "already ran: signal for session 2025-11-28 was started at 20" in second.stderr
    assert f"on host {os.uname().nodename} (pid " in second.stderr
    assert "market-timers run signal --session 2025-11-28 --force" in second.stderr
    rec = record(tmp_path)
    assert rec["attempts"] == 1 and rec["refused_starts"] == ["already-ran"]


def test_already_ran_is_told_before_a_stale_start(tmp_path):
    """A late second start of a session that ran is 'already ran' (warning), not 'did not run'."""
    assert run(context(tmp_path), "/bin/true").returncode == 0
    late = context(tmp_path, datetime.now(UTC) - timedelta(hours=1))
    assert run(late, "/bin/true").returncode == exitcodes.ALREADY_RAN


def test_a_stale_start_does_not_use_up_the_session(tmp_path):
    command, out = appender(tmp_path)
    stale = run(context(tmp_path, datetime.now(UTC) - timedelta(seconds=600)), *command)
    assert stale.returncode == exitcodes.STALE_START and not out.exists()
    assert run(context(tmp_path), *command).returncode == 0  # e.g. moved later, or by hand
    assert out.read_text() == "sent\n"


def test_an_overlap_skip_does_not_use_up_the_session(tmp_path):
    command, out = appender(tmp_path)
    env = context(tmp_path, MARKET_JOB="closing-orders")
    with running_job(tmp_path, "echo go; exec sleep 30") as holder:
        assert holder.first_line == "go"
        assert run(env, *command).returncode == exitcodes.OVERLAP_SKIPPED
        assert record(tmp_path, "closing-orders")["refused"] == "overlap-skipped"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert run(env, *command).returncode == 0
    assert out.read_text() == "sent\n"


def test_many_starts_racing_for_one_session_run_it_exactly_once(tmp_path):
    """Each in its own lock group, so only the ledger's claim stands between them."""
    out = tmp_path / "orders-sent"
    procs = [subprocess.Popen([*RUNNER, "--", "/bin/sh", "-c", f"echo $$ >> {out}"],
                              env=context(tmp_path, MARKET_LOCK_GROUP=f"g{i}"),
                              stderr=subprocess.PIPE, text=True) for i in range(16)]
    codes = sorted(p.wait(timeout=60) for p in procs)
    for p in procs:
        p.stderr.close()
    assert codes == [0] + [exitcodes.ALREADY_RAN] * 15
    assert len(out.read_text().splitlines()) == 1


def test_record_after_a_refused_second_start_keeps_the_first_runs_result(tmp_path):
    env = context(tmp_path)
    assert run(env, "/bin/true").returncode == 0
    finish(env, SERVICE_RESULT="success", EXIT_CODE="exited", EXIT_STATUS="0")
    assert run(env, "/bin/true").returncode == exitcodes.ALREADY_RAN
    finish(env, SERVICE_RESULT="exit-code", EXIT_CODE="exited", EXIT_STATUS="173")
    rec = record(tmp_path)
    assert (rec["result"], rec["exit_status"], rec["attempts"]) == ("success", "0", 1)


def finish(env: dict, **result) -> None:
    subprocess.run([*RUNNER, "--record"], env={**env, **result}, check=True)


def ticket(tmp_path: Path, nonce: str, force: bool, session: str = "2025-11-28") -> dict:
    """A `market-timers run` ticket as its one-off unit gets it: the ledger's copy, and the
    nonce as the unit's credential (systemd loads it from root's file); the environment."""
    from market_timers.ledger.local import LocalLedger

    LocalLedger(str(tmp_path / "state")).write_ticket(nonce, {
        "job": "signal", "session": session, "force": "yes" if force else "no", "by": "alice"})
    creds = tmp_path / f"credentials-{nonce}"
    creds.mkdir()
    (creds / "market-timers.ticket").write_text(nonce + "\n")
    return {"MARKET_TICKET": f"run-unit-{nonce}", "CREDENTIALS_DIRECTORY": str(creds)}


def test_a_forced_start_runs_again_as_the_next_attempt_once_per_ticket(tmp_path):
    command, out = appender(tmp_path)
    assert run(context(tmp_path), *command).returncode == 0
    forced = context(tmp_path, datetime.now(UTC) - timedelta(hours=3),
                     **ticket(tmp_path, "n1", force=True))
    proc = run(forced, "/usr/bin/env")
    assert proc.returncode == 0, proc.stderr
    assert "MARKET_ATTEMPT=2" in proc.stdout and "MARKET_TICKET" not in proc.stdout
    assert "started by alice with `market-timers run --force`" in proc.stderr
    rec = record(tmp_path)
    assert (rec["attempt"], rec["how"], rec["by"], rec["attempts"]) == (2, "forced", "alice", 2)
    again = run(forced, *command)  # the same ticket cannot force a second run
    assert again.returncode == exitcodes.RUNNER_ERROR
    assert "start ticket of run-unit-n1 (signal for session 2025-11-28) is unknown or already " \
        "used" in again.stderr
    assert out.read_text() == "sent\n"


def test_a_ticket_for_another_session_is_refused(tmp_path):
    proc = run(context(tmp_path, **ticket(tmp_path, "n2", force=True, session="2025-11-27")),
               "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR


def test_a_ticket_without_roots_credential_is_refused_whoever_wrote_it(tmp_path):
    """A job or a local user who could write the ledger's ticket, and set MARKET_TICKET, still
    cannot start a forced run: the nonce comes only as the one-off unit's credential."""
    command, out = appender(tmp_path)
    assert run(context(tmp_path), *command).returncode == 0
    env = ticket(tmp_path, "f1", force=True)
    for forged in ({**env, "CREDENTIALS_DIRECTORY": str(tmp_path / "none")},
                   {"MARKET_TICKET": "f1"}):
        proc = run(context(tmp_path, **forged), *command)
        assert proc.returncode == exitcodes.RUNNER_ERROR
        assert "is missing: only a start by `market-timers run` has one" in proc.stderr
    assert out.read_text() == "sent\n"


def test_an_operator_start_without_force_skips_the_grace_but_not_the_ledger(tmp_path):
    command, out = appender(tmp_path)
    late = context(tmp_path, datetime.now(UTC) - timedelta(hours=3),
                   **ticket(tmp_path, "n3", force=False))
    assert run(late, *command).returncode == 0  # a missed session, caught up by hand
    assert run({**late, **ticket(tmp_path, "n4", force=False)}, *command).returncode \
        == exitcodes.ALREADY_RAN
    assert out.read_text() == "sent\n"


def test_an_unwritable_ledger_refuses_the_run_with_172(tmp_path):
    command, out = appender(tmp_path)
    (tmp_path / "state").write_text("not a directory")
    proc = run(context(tmp_path), *command)
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "not running signal for session 2025-11-28" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_a_symlink_planted_in_the_ledger_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state" / "ledger").mkdir(parents=True)
    (tmp_path / "state" / "ledger" / "signal").symlink_to(elsewhere)
    proc = run(context(tmp_path), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "Traceback" not in proc.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_missing_or_unwritable_lock_dir_is_172_with_a_clear_line(tmp_path):
    (tmp_path / "afile").write_text("")
    proc = run(context(tmp_path, MARKET_LOCK_DIR=str(tmp_path / "afile" / "locks")), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert f"cannot open the lock directory {tmp_path}/afile/locks/locks" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert record(tmp_path) is None  # not claimed: the session can still run


def test_lock_files_are_0600_in_a_0700_directory_no_other_user_can_open(tmp_path):
    assert run(context(tmp_path), "/bin/true").returncode == 0
    locks = tmp_path / "run" / "locks"
    assert oct(locks.stat().st_mode & 0o777) == "0o700"
    assert oct((locks / "orders.lock").stat().st_mode & 0o777) == "0o600"
    if os.geteuid() != 0:
        return  # another user's attempt needs root to become one
    os.chmod(tmp_path, 0o755)  # pytest's tmp_path is 0700: let `nobody` walk to the lock
    os.chmod(tmp_path / "run", 0o755)
    pid = os.fork()
    if pid == 0:
        os.setgid(65534)
        os.setuid(65534)
        try:
            os.open(locks / "orders.lock", os.O_RDONLY)
            os._exit(0)
        except PermissionError:
            os._exit(13)
        os._exit(1)
    assert os.WEXITSTATUS(os.waitpid(pid, 0)[1]) == 13  # EACCES: cannot even open it


def test_busy_names_the_real_holder_even_when_the_note_lies(tmp_path):
    with running_job(tmp_path, "echo go; sleep 10") as first:
        assert first.first_line == "go"
        (tmp_path / "run" / "locks" / "orders.lock").write_text("pid 1 job forged session x\n")
        proc = run(context(tmp_path, MARKET_JOB="closing-orders"), "/bin/true")
        assert proc.returncode == exitcodes.OVERLAP_SKIPPED
        assert f"held by pid {first.pid} (job signal session 2025-11-28); its note: pid 1 job " \
            "forged" in proc.stderr


def test_a_lock_directory_other_users_may_enter_is_refused(tmp_path):
    (tmp_path / "run" / "locks").mkdir(parents=True)
    os.chmod(tmp_path / "run" / "locks", 0o755)
    proc = run(context(tmp_path), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "is not this user's own 0700 directory" in proc.stderr
    assert record(tmp_path) is None


def test_a_symlink_planted_as_the_lock_file_is_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "locks").mkdir(mode=0o700, parents=True)
    (tmp_path / "run" / "locks" / "orders.lock").symlink_to(target)
    proc = run(context(tmp_path), "/bin/true")
    assert proc.returncode == exitcodes.RUNNER_ERROR
    assert "orders.lock: it is a symbolic link, not followed" in proc.stderr
    assert target.read_text() == "precious\n"


def test_help_works_without_a_job_context():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKET_")}
    proc = subprocess.run([*RUNNER, "--help"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: market-timers-run -- COMMAND")
    assert "173" in proc.stdout


class _Book:
    """A ledger whose claim fails as told: OSError (a full disk) or lost to another start."""

    def __init__(self, fail=None, lost=False):
        self.fail, self.lost, self.refused = fail, lost, []

    def claim(self, key, how, fields):
        from market_timers.ledger import Claim

        if self.fail:
            raise self.fail
        if self.lost:
            return Claim(False, 1, {"host": "ny4-b", "pid": 7, "started_utc": "x"})
        return Claim(True, 1, None)

    def refuse(self, key, fields):
        self.refused.append(fields["refused"])


@pytest.mark.parametrize("book, status, refused", [
    (_Book(fail=OSError(28, "No space left on device")), exitcodes.RUNNER_ERROR, []),
    (_Book(lost=True), exitcodes.ALREADY_RAN, ["already-ran"]),
])
def test_a_claim_that_cannot_be_written_or_was_lost_closes_the_lock_and_never_runs(
        tmp_path, capsys, book, status, refused):
    """The claim is the last step before the exec (one-shot and periodic starts share it): a
    full disk is 172 ("it could run twice"), a lost race 173; either way the lock group is
    released at once, not held by a start that will not run."""
    from market_timers.ledger import Key
    from market_timers.runner import start as runbase

    fd = os.open(tmp_path / "orders.lock", os.O_RDWR | os.O_CREAT)
    result = runbase.claim_start(book, Key("signal", "2025-11-28"), "timer", {}, fd,
                                 "signal for session 2025-11-28", {})
    assert result == status and book.refused == refused
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    if status == exitcodes.RUNNER_ERROR:
        assert "without its claim it could run twice" in capsys.readouterr().err
