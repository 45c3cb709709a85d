"""The trust boundary on a real systemd (issue 29): a hostile job, run by the package's runner as
its own user, tries every attack of the adversarial review on the scheduler's state; then the
victim order job still runs exactly once, on time, its failure alert still reaches the fake
Telegram, and sync still installs its timers. A plain local user (neither the package's nor the
jobs') cannot block a lock group either.

The hostile program finds the scheduler's paths by walking the state and runtime directories as
far as it can, so that it attacks wherever the files live, not only where they lived before.
Each attack prints one line, `attack NAME: denied (...)` or `attack NAME: DONE ...`.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from .scenario import JOB, JOB_HOME, JOBS_DIR, STATE_DIR, Job, Scenario, instant_in, toml_value

pytestmark = pytest.mark.e2e

HOSTILE = f"{JOBS_DIR}/hostile"
ORDERS_LOG = f"{JOB_HOME}/e2e-hostile-orders.log"  # not /var/tmp: PrivateTmp=yes
LOCAL_USER = "e2e-local"

HOSTILE_SCRIPT = r'''#!/opt/venvs/market-timers/bin/python3
"""A job that attacks the scheduler (argv: victim job, victim session)."""
import fcntl
import json
import os
import signal
import sys
import time

victim, session = sys.argv[1], sys.argv[2]
STATE, RUN, SPOOL = "/var/lib/market-timers", "/run/market-timers", "/var/spool/market-timers"
print(f"hostile uid={os.getuid()} gid={os.getgid()} groups={os.getgroups()}", flush=True)


def attack(name, fn):
    try:
        fn()
    except OSError as e:
        print(f"attack {name}: denied ({type(e).__name__}: {e})", flush=True)
        return
    print(f"attack {name}: DONE", flush=True)


def walk(top):
    """Every directory and file under top that this user can see (errors: skipped)."""
    dirs, files = [top], []
    for root, ds, fs in os.walk(top, onerror=lambda e: None):
        dirs += [os.path.join(root, d) for d in ds]
        files += [os.path.join(root, f) for f in fs]
    return dirs, files


def write_new(path, text="{}"):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.write(fd, text.encode())
    os.close(fd)


def plant_claim():
    where = os.path.join(STATE, "ledger", victim, session)
    os.makedirs(where, exist_ok=True)
    write_new(os.path.join(where, "attempt-1"), "host elsewhere\npid 1\n")


def silence_channels():
    far = {"telegram": {"not_before_utc": "9999-12-31T00:00:00Z"},
           "slack": {"not_before_utc": "9999-12-31T00:00:00Z"}}
    os.makedirs(os.path.join(STATE, "alerts"), exist_ok=True)
    path = os.path.join(STATE, "alerts", "channels.json")
    with open(path, "w") as f:
        json.dump(far, f)


def rewrite_dedup():
    os.makedirs(os.path.join(STATE, "alerts"), exist_ok=True)
    with open(os.path.join(STATE, "alerts", "dedup.json"), "w") as f:
        f.write("{}")


def rewrite_snapshots():
    found = [f for top in (STATE, "/etc/market-timers") for f in walk(top)[1]
             if os.path.basename(f).startswith("alerts-snapshot")]
    found.append(os.path.join(STATE, "alerts-snapshot.json"))
    for path in found:  # rewrite in place, then replace by a rename
        try:
            with open(path, "r+") as f:
                f.write('{"user": "root"}')
            raise SystemExit(f"rewrote {path}")
        except OSError:
            pass
        tmp = path + ".hostile"
        try:
            write_new(tmp, '{"user": "root"}')
            os.replace(tmp, path)
            raise SystemExit(f"replaced {path}")
        except OSError:
            pass
    raise PermissionError(f"none of {found} could be rewritten or replaced")


def forge_ticket():
    dirs = [d for top in (STATE,) for d in walk(top)[0] if "ticket" in os.path.basename(d)]
    dirs.append(os.path.join(STATE, "ledger", "tickets"))
    for d in dirs:
        try:
            os.makedirs(d, exist_ok=True)
            write_new(os.path.join(d, "f" * 32),
                      f"job {victim}\nsession {session}\nforce yes\nby the-operator\n")
            raise SystemExit(f"forged a ticket in {d}")
        except OSError:
            pass
    raise PermissionError(f"no ticket directory of {dirs} is writable")


def flock_locks():
    # Every lock file there is, and the victim group's in the lock directories (created if
    # missing: holding it blocks the group as well as an existing one).
    locks = [f for f in walk(RUN)[1] if f.endswith(".lock")]
    locks += [os.path.join(RUN, "orders.lock"), os.path.join(RUN, "locks", "orders.lock")]
    held = []
    for path in locks:
        for flags in (os.O_RDONLY, os.O_RDWR | os.O_CREAT):
            try:
                fd = os.open(path, flags | os.O_NOFOLLOW, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(path)
                break
            except OSError:
                pass
    if held:
        raise SystemExit(f"holds the locks {held}")
    raise PermissionError(f"none of {sorted(set(locks))} could be locked")


def plant_fifo():
    for d in (os.path.join(STATE, "ledger"), os.path.join(STATE, "ledger", victim),
              os.path.join(STATE, "runs")):
        try:
            os.mkfifo(os.path.join(d, session))
            raise SystemExit(f"planted a FIFO in {d}")
        except OSError:
            pass
    raise PermissionError("no ledger directory takes a FIFO")


def read_secrets():
    read = []
    for top in ("/etc/credstore", os.environ.get("CREDENTIALS_DIRECTORY") or "/nonexistent"):
        for path in walk(top)[1]:
            try:
                with open(path, "rb") as f:
                    f.read(1)
                read.append(path)
            except OSError:
                pass
    if read:
        raise SystemExit(f"read the secrets {read}")
    raise PermissionError("no credential readable")


def read_state():
    """The scheduler's state: the ledger's records, the alerts' state, the dead-man's report."""
    names = os.listdir(STATE)  # the job is not in the package's group: 0750 keeps it out
    read = []
    for path in walk(STATE)[1]:
        try:
            with open(path, "rb") as f:
                f.read(1)
            read.append(path)
        except OSError:
            pass
    raise SystemExit(f"listed {names} and read {len(read)} files: {read[:5]}")


def signal_scheduler():
    killed = []
    for pid in (os.getppid(), *(int(p) for p in os.listdir("/proc") if p.isdigit())):
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if uid == os.getuid() and pid != os.getppid():
            continue
        try:
            os.kill(pid, signal.SIGSTOP)  # stop, not kill: the test's box must survive a success
            os.kill(pid, signal.SIGCONT)
            killed.append(pid)
        except OSError:
            pass
    if killed:
        raise SystemExit(f"signalled the scheduler's pids {killed}")
    raise PermissionError("no process of the scheduler could be signalled")


def keep_realtime():
    """First thing at the instant, inside the escort's window: kill the escort (any other
    process of this uid), then spin past the window with whatever policy is left."""
    at_start = os.sched_getscheduler(0)
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{p}").st_uid == os.getuid() or int(p) == os.getppid():
                os.kill(int(p), signal.SIGKILL)
        except OSError:
            pass
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        pass
    print(f"hostile policy at start {at_start}", flush=True)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:  # spin past the escort's window
        pass
    policy = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0x40000000)
    if policy != os.SCHED_OTHER:
        raise SystemExit(f"kept scheduling policy {policy} past the escort's window")
    raise PermissionError(f"back to SCHED_OTHER (policy {policy}) after the window")


for name, fn in (("keep-realtime", keep_realtime), ("plant-claim", plant_claim), ("silence-channels", silence_channels),
                 ("rewrite-dedup", rewrite_dedup), ("rewrite-snapshot", rewrite_snapshots),
                 ("forge-ticket", forge_ticket), ("flock-locks", flock_locks),
                 ("plant-fifo", plant_fifo), ("read-secrets", read_secrets),
                 ("read-state", read_state), ("signal-scheduler", signal_scheduler)):
    try:
        attack(name, fn)
    except SystemExit as e:
        print(f"attack {name}: DONE {e}", flush=True)
print("hostile done", flush=True)
'''

ATTACKS = ("plant-claim", "silence-channels", "rewrite-dedup", "rewrite-snapshot", "forge-ticket",
           "flock-locks", "plant-fifo", "read-secrets", "read-state", "signal-scheduler",
           "keep-realtime")

# The victim: sends its orders (one line per run), then fails, so that its failure alert is due.
VICTIM_SCRIPT = f'''#!/bin/sh
echo "sent attempt=$MARKET_ATTEMPT session=$MARKET_SESSION" >> {ORDERS_LOG}
echo "e2e-victim sent its orders, then the broker rejected the rest"
exit 3
'''


class ProgramJob(Job):
    """A scenario job that runs `program` instead of the common test job."""

    def __init__(self, job: Job, program: str) -> None:
        super().__init__(job.name, job.instant, job.args, job.keys)
        self.program = program

    def toml(self) -> str:
        return super().toml().replace(toml_value([JOB, *self.args]),
                                      toml_value([self.program, *self.args]))


def test_a_hostile_job_cannot_cancel_forge_block_or_silence_what_the_scheduler_guards(
    scenario: Scenario,
) -> None:
    box = scenario.box
    box.write_file(HOSTILE, HOSTILE_SCRIPT, mode=0o755)
    box.write_file(f"{JOBS_DIR}/victim", VICTIM_SCRIPT, mode=0o755)
    box.run(["sh", "-c", f"rm -f {ORDERS_LOG}; install -m 0666 /dev/null {ORDERS_LOG}"])
    hostile = Job("hostile", instant_in(8), ["x"])  # its own lock group: it attacks "orders"
    victim = Job("victim", hostile.instant + timedelta(seconds=12), [], {"lock": "orders"})
    hostile.args = [victim.name, victim.session.isoformat()]
    hostile.keys["lead"] = None  # the default pre-fire: the real-time escort lends SCHED_FIFO
    scenario.schedule([ProgramJob(hostile, HOSTILE), ProgramJob(victim, f"{JOBS_DIR}/victim")])

    scenario.wait_finished(hostile, 40)
    log = scenario.journal_of(hostile)
    print(log)
    results = dict(re.findall(r"attack (\S+): (denied|DONE)", log))
    assert results == {name: "denied" for name in ATTACKS}, log
    assert "hostile done" in log
    uid = int(re.search(r"hostile uid=(\d+)", log)[1])
    assert box.run(["id", "-un", str(uid)]).stdout.strip() != "market-timers"
    groups = re.search(r"hostile uid=\d+ gid=\d+ groups=\[([\d, ]*)\]", log)[1]
    package_gid = box.run(["getent", "group", "market-timers"]).stdout.split(":")[2]
    spool_gid = box.run(["getent", "group", "market-timers-spool"]).stdout.split(":")[2]
    assert spool_gid in groups.split(", ") and package_gid not in groups.split(", "), log

    # The victim runs exactly once, on time, and its failure alert reaches Telegram.
    record = scenario.wait_finished(victim, 40)
    assert record["exit_status"] == "3"
    sent = box.read_file(ORDERS_LOG).splitlines()
    assert sent == [f"sent attempt=1 session={victim.session}"]
    alert = scenario.wait_message("telegram", "victim failed", timeout=60)["text"]
    assert alert.startswith("[CRITICAL] victim failed with exit status 3")
    assert "e2e-victim sent its orders" in alert
    # No credential left the host through the hostile job: the fakes saw nothing of it.
    assert not scenario.messages("telegram", "hostile uid"), "the hostile job's log was sent"

    # Sync still installs the victim's next timer, and nothing in the ledger is the job's.
    out = scenario.sync()
    following = victim.unit.instance
    assert "victim" in scenario.list_timers(), out
    owners = box.run(["sh", "-c", f"find {STATE_DIR} ! -user market-timers ! -user root "
                                  "-printf '%u %p\\n'"]).stdout
    assert owners == "", f"files of another user in the state directory:\n{owners}"
    assert following


def test_a_plain_local_user_cannot_take_or_probe_a_lock_group(scenario: Scenario) -> None:
    box = scenario.box
    box.run(["sh", "-c", f"id {LOCAL_USER} >/dev/null 2>&1 || useradd --system {LOCAL_USER}"])
    holder = Job("holder", instant_in(6), ["sleep", "1"], {"lock": "orders"})
    scenario.schedule([holder])
    scenario.wait_finished(holder, 30)  # the group's lock file exists now
    probe = r'''
import fcntl, os
found = []
for root, ds, fs in os.walk("/run/market-timers", onerror=lambda e: found.append(("walk", str(e)))):
    for d in ds + ["."]:
        path = os.path.join(root, d, "orders.lock")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            found.append(("LOCKED", path))
        except OSError as e:
            found.append(("denied", f"{path}: {e}"))
print("\n".join(f"{a} {b}" for a, b in found))
'''
    out = box.run(["runuser", "-u", LOCAL_USER, "--", "/usr/bin/python3", "-c", probe]).stdout
    print(out)
    assert "LOCKED" not in out, out


LEAVER = f"{JOBS_DIR}/leaver"
LEAVER_SCRIPT = r'''#!/opt/venvs/market-timers/bin/python3
"""A job that leaves a process behind, deaf to SIGTERM, for SECONDS (argv: fork|orphan SECONDS):
`fork` double-forks a child and exits; `orphan` clears its parent-death signal and waits."""
import ctypes
import os
import signal
import sys
import time

mode, seconds = sys.argv[1], float(sys.argv[2])
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child
if mode == "orphan":
    ctypes.CDLL(None, use_errno=True).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: none
    print(f"e2e-leaver orphan pid={os.getpid()} ready", flush=True)
    time.sleep(seconds)
    print("e2e-leaver orphan done", flush=True)
    sys.exit(0)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(f"e2e-leaver left pid={os.getpid()}", flush=True)
        time.sleep(seconds)
        os._exit(0)
    os._exit(0)
os.wait()
print("e2e-leaver exits", flush=True)
'''


def test_a_lock_group_stays_busy_until_the_last_runs_processes_are_gone(
    scenario: Scenario,
) -> None:
    """Issue 41 item 5. `forker` (group books) double-forks a child that outlives it by 14 s;
    `orphan` (group desk) clears its parent-death signal and its supervisor is killed -9: both
    leave a process of the job's own user in their units (deaf to SIGTERM, so systemd's stop
    waits). The next holder of each group is refused as busy, naming what is left; a start
    once the left process has ended runs."""
    box = scenario.box
    scenario.shared_user = ""  # the default: each job a user of its own
    box.write_file(LEAVER, LEAVER_SCRIPT, mode=0o755)
    forker = Job("forker", instant_in(8), ["fork", "14"], {"lock": "books"})
    orphan = Job("orphan", forker.instant, ["orphan", "14"], {"lock": "desk"})
    follower = Job("follower", forker.instant + timedelta(seconds=6), ["ok"], {"lock": "books"})
    heir = Job("heir", forker.instant + timedelta(seconds=6), ["ok"], {"lock": "desk"})
    later = Job("later", forker.instant + timedelta(seconds=22), ["ok"], {"lock": "books"})
    scenario.schedule([ProgramJob(forker, LEAVER), ProgramJob(orphan, LEAVER), follower, heir,
                       later])

    ready = box.wait_for(lambda: re.search(r"e2e-leaver orphan pid=(\d+) ready",
                                           scenario.journal_of(orphan)), 30, "orphan ready")
    box.run(["systemctl", "kill", "--kill-who=main", "--signal=SIGKILL", orphan.service])
    assert box.exists(f"/proc/{ready[1]}"), "the orphan died with its supervisor"

    for job, last, left in ((follower, forker, "market-job-forker"),
                            (heir, orphan, "market-job-orphan")):
        record = scenario.wait_finished(job, 30)
        log = scenario.journal_of(job)
        print(log)
        assert record["refused"] == "overlap-skipped" and record["exit_status"] == "171", log
        assert "e2e-job start" not in log
        assert f"its last run (job {last.name} session {last.session}) has ended" in log
        assert f"{last.service} still has processes (pid " in log and f" of {left}" in log
    assert "e2e-leaver left pid=" in scenario.journal_of(forker)

    done = scenario.wait_finished(later, 40)  # the left child ended 14 s after the forker
    assert done["result"] == "success", scenario.journal_of(later)
    assert "e2e-job finished fine" in scenario.journal_of(later)


GATEWAY = "tradingd"
EVENT_JOB = f"{JOBS_DIR}/event-job"
EVENT_JOB_SCRIPT = """#!/opt/venvs/market-timers/bin/python3
import os
import sys
from market_timers.jobnotify import event
print(f"e2e-event-job uid={os.getuid()} spooled:", event(sys.argv[1], key=sys.argv[2]),
      flush=True)
"""
GATEWAY_RULE = """
[[events.incident]]
name = "connection"
open = ["heartbeat_lost", "disconnected"]
close = ["reconnected"]
interrupt_after = "15s"
severity = "warning"
writers = ["tradingd"]
"""


def test_a_job_cannot_close_the_gateways_incident(scenario: Scenario) -> None:
    """Issue 41: the gateway (its own user, in the spool's group) opens `connection gw1`; a
    job, a user of its own, spools `reconnected gw1` a few seconds later: the processor refuses
    it (the file's owner is no writer of the rule) and tells so, and the incident is alerted
    when its 15 s pass, as if the job had said nothing."""
    box = scenario.box
    scenario.shared_user = ""  # the default: each job a user of its own
    if box.run(["id", GATEWAY], check=False).returncode != 0:
        box.run(["useradd", "--system", "--no-create-home", "-G", "market-timers-spool", GATEWAY])
    box.write_file(EVENT_JOB, EVENT_JOB_SCRIPT, mode=0o755)
    closer = Job("closer", instant_in(10), ["reconnected", "gw1"])
    scenario.write_config([ProgramJob(closer, EVENT_JOB)], extra="\n[events]\n" + GATEWAY_RULE)
    assert f"start {closer.timer}" in scenario.sync()
    box.run(["runuser", "-u", GATEWAY, "--", "market-timers", "event", "heartbeat_lost",
             "--key", "gw1"], timeout=60)

    scenario.wait_finished(closer, 40)
    log = scenario.journal_of(closer)
    print(log)
    assert "e2e-event-job uid=" in log and "spooled: True" in log, log
    told = scenario.wait_message("slack", "set aside", timeout=30)["text"]
    print(told)
    assert "written by market-job-closer" in told and "connection" in told
    alert = scenario.wait_message("slack", "connection gw1: not resolved", timeout=40)["text"]
    print(alert)
    assert "gw1" in box.run(["market-timers", "incidents"]).stdout  # still open
    box.run(["runuser", "-u", GATEWAY, "--", "market-timers", "event", "reconnected",
             "--key", "gw1"], timeout=60)  # the gateway's own close is taken
    scenario.wait_message("slack", "connection gw1 resolved after", timeout=30)
