"""A job's secrets on a real systemd (issue 27): `credentials = ["..."]` loads a file of
/etc/credstore with LoadCredential=, and the job, run by the runner as its own user
(market-job-<name>, issue 41), reads its copy in $CREDENTIALS_DIRECTORY, and nothing of the unit's own
credentials directory (the runner's: there the cluster DSN lives); the copy is gone after the run.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from .scenario import CREDSTORE, JOB, JOBS_DIR, Job, Scenario, instant_in, toml_value

pytestmark = pytest.mark.e2e

READER = f"{JOBS_DIR}/secret-reader"
SECRET = "sk-e2e-broker-4242"
NAME = "e2e-broker-api-key"

READER_SCRIPT = r'''#!/usr/bin/python3
"""Prints what a job sees of its credentials."""
import os
import pwd
import time

here = os.environ.get("CREDENTIALS_DIRECTORY", "")
print(f"secret-reader user={pwd.getpwuid(os.getuid()).pw_name} dir={here}", flush=True)
st = os.stat(here)
print(f"secret-reader dir-owner={pwd.getpwuid(st.st_uid).pw_name} dir-mode={st.st_mode & 0o777:o}")
print(f"secret-reader listing={','.join(sorted(os.listdir(here)))}")
with open(os.path.join(here, "NAME")) as f:
    print(f"secret-reader secret={f.read().strip()}")
for d in os.listdir("/run/credentials") if os.path.isdir("/run/credentials") else []:
    try:
        os.listdir(os.path.join("/run/credentials", d))
        print(f"secret-reader unit-credentials {d}: READABLE")
    except OSError as e:
        print(f"secret-reader unit-credentials {d}: denied ({e.strerror})")
print("secret-reader done", flush=True)
time.sleep(float(os.environ.get("E2E_HOLD_SEC", "0")))  # held while another job peeks
'''.replace("NAME", NAME)

# Another job, running while the reader holds its copy: looks for it where the runner writes it.
PEEKER = f"{JOBS_DIR}/secret-peeker"
PEEKER_SCRIPT = r"""#!/usr/bin/python3
import glob
import os
import signal

found = glob.glob("/dev/shm/*") + glob.glob("/proc/[0-9]*/root/dev/shm/market-credentials-*")
print(f"peeker sees {sorted(set(found))}", flush=True)
for path in (glob.glob("/dev/shm/market-credentials-*/*")
             + glob.glob("/proc/[0-9]*/root/dev/shm/market-credentials-*/*")):
    try:
        with open(path) as f:
            print(f"peeker READ {path}: {f.read().strip()}", flush=True)
    except OSError as e:
        print(f"peeker denied {path} ({e.strerror})", flush=True)
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"secret-reader" not in f.read():
                continue
    except OSError:
        continue
    try:
        os.kill(int(pid), signal.SIGCONT)  # harmless, but only to a process one may signal
        print(f"peeker SIGNALLED the holder {pid}", flush=True)
    except OSError as e:
        print(f"peeker signal denied {pid} ({e.strerror})", flush=True)
    try:
        with open(f"/proc/{pid}/root/dev/shm/..") as f:
            pass
    except OSError as e:
        if e.errno == 21:  # IsADirectoryError: the holder's root was reachable
            print(f"peeker REACHED the holder's root {pid}", flush=True)
        else:
            print(f"peeker root denied {pid} ({e.strerror})", flush=True)
print("peeker done", flush=True)
"""


class ReaderJob(Job):
    program = READER

    def toml(self) -> str:
        return super().toml().replace(toml_value([JOB, *self.args]), toml_value([self.program]))


class PeekerJob(ReaderJob):
    program = PEEKER


def test_a_job_reads_its_own_credential_as_its_user_and_not_the_runners(
    scenario: Scenario,
) -> None:
    box = scenario.box
    scenario.shared_user = ""  # the default: each job a user of its own
    box.write_file(READER, READER_SCRIPT, mode=0o755)
    box.write_file(f"{CREDSTORE}/{NAME}", SECRET + "\n", 0o600)
    try:
        job = ReaderJob("secrets", instant_in(8), [], {"credentials": [NAME]})
        scenario.schedule([job])
        unit = box.read_file(f"/etc/systemd/system/{job.service}")
        assert f"LoadCredential={NAME}\n" in unit
        out = box.run(["systemd-analyze", "security", "--no-pager", job.service]).stdout
        score = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\S+)", out)
        print(f"[e2e] systemd-analyze security {job.service}: {score[1]} {score[2]}")
        assert float(score[1]) <= 4.1  # no worse than before issue 41 (3.9-4.1)
        record = scenario.wait_finished(job, 40)
        log = scenario.journal_of(job)
        print(log)
        assert record["exit_status"] == "0", log
        assert "secret-reader user=market-job-secrets dir=/dev/shm/market-credentials-" in log
        assert "dir-owner=market-job-secrets dir-mode=500" in log
        assert f"listing={NAME}" in log and f"listing={NAME}," not in log  # its own only
        assert f"secret-reader secret={SECRET}" in log
        assert "READABLE" not in log  # systemd's directory of the unit is the runner's
        assert "secret-reader done" in log
        left = box.run(["sh", "-c", "ls -d /dev/shm/market-credentials-* 2>/dev/null || true"])
        assert left.stdout.strip() == ""  # removed once the job ended
    finally:
        box.run(["rm", "-f", f"{CREDSTORE}/{NAME}"])


def test_a_job_whose_credential_is_missing_does_not_run_takes_no_claim_and_alerts(
    scenario: Scenario,
) -> None:
    """systemd 252 starts a unit whose LoadCredential=NAME is in no credstore: the runner
    refuses it before the claim (the session can still run once the file is there)."""
    box = scenario.box
    box.write_file(READER, READER_SCRIPT, mode=0o755)
    box.run(["rm", "-f", f"{CREDSTORE}/{NAME}"])
    job = ReaderJob("nosecret", instant_in(8), [], {"credentials": [NAME]})
    scenario.schedule([job])
    msg = scenario.wait_message("telegram", "nosecret", timeout=60,
                                poll=scenario.flush_outbox)["text"]
    print(msg)
    assert msg.startswith("[CRITICAL] nosecret could not be started by the runner")
    assert f"cannot read the job's credential {NAME}" in msg
    assert f"put it in {CREDSTORE}/{NAME}" in msg
    assert "secret-reader" not in scenario.journal_of(job)  # the job never started
    assert scenario.ledger(job)["attempts"] == []  # no claim: it can still run


def test_another_job_cannot_reach_a_running_jobs_credential(scenario: Scenario) -> None:
    """Issue 41: the runner's copy is in the unit's own /dev/shm (TemporaryFileSystem=), not the
    host's, which every unit shares even under PrivateDevices=yes; and the other job, a user of
    its own, can neither reach the holder's mounts through /proc/PID/root nor signal it."""
    box = scenario.box
    scenario.shared_user = ""  # the default: each job a user of its own
    box.write_file(READER, READER_SCRIPT, mode=0o755)
    box.write_file(PEEKER, PEEKER_SCRIPT, mode=0o755)
    box.write_file(f"{CREDSTORE}/{NAME}", SECRET + "\n", 0o600)
    try:
        reader = ReaderJob("holder", instant_in(8), [],
                           {"credentials": [NAME], "environment": {"E2E_HOLD_SEC": "12"}})
        peeker = PeekerJob("peeker", reader.instant + timedelta(seconds=4), [])
        scenario.schedule([reader, peeker])
        scenario.wait_finished(peeker, 40)
        log = scenario.journal_of(peeker)
        print(log)
        assert "peeker done" in log
        assert "market-credentials-" not in log and SECRET not in log, log
        assert "peeker signal denied" in log and "SIGNALLED" not in log, log  # another uid
        assert "peeker root denied" in log and "REACHED" not in log, log
        record = scenario.wait_finished(reader, 40)
        held = scenario.journal_of(reader)
        assert record["exit_status"] == "0", held
        assert f"secret-reader secret={SECRET}" in held  # it had its copy meanwhile
    finally:
        box.run(["rm", "-f", f"{CREDSTORE}/{NAME}"])
