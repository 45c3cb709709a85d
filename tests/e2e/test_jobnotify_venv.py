"""A Python job in its own virtualenv uses market_timers.jobnotify (issue 27, 4): one line in the
venv (a .pth naming /usr/lib/market-timers/python, which holds only the package's market_timers
and sdnotify) and it heartbeats under WatchdogSec= and sends an event; the package's pandas is
not put in its way."""

from __future__ import annotations

import pytest

from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

LEAD = 8
VENV = "/opt/e2e-jobvenv"
SCRIPT = "/usr/local/lib/e2e-jobs/venv-job"
VENV_JOB = f"""#!{VENV}/bin/python
import importlib.util
import sys
import time

from market_timers.jobnotify import event, heartbeat, ready

ready()
for _ in range(6):  # 6 s under a 3 s watchdog: only the heartbeats keep it alive
    heartbeat()
    time.sleep(1)
print(f"venv-job prefix={{sys.prefix}} pandas={{importlib.util.find_spec('pandas') is not None}}",
      flush=True)
print(f"venv-job spooled={{event('venv_job.done', key='k1', text='from its own venv')}}",
      flush=True)
"""


def test_a_job_in_its_own_venv_heartbeats_and_sends_an_event(scenario: Scenario) -> None:
    box = scenario.box
    box.run(["rm", "-rf", VENV])
    box.run(["python3", "-m", "venv", "--without-pip", VENV])
    site = box.run(["sh", "-c", f"ls -d {VENV}/lib/python3*/site-packages"]).stdout.strip()
    box.write_file(f"{site}/market-timers.pth", "/usr/lib/market-timers/python\n")  # the README's line
    box.write_file(SCRIPT, VENV_JOB, mode=0o755)
    job = Job("venvjob", instant_in(LEAD), [])
    extra = (f'[[job]]\nname = "venvjob"\nevent = "open"\noffset = "+{job.offset}s"\n'
             f'command = ["{SCRIPT}"]\nwatchdog = "3s"\ntimeout = "40s"\n')
    scenario.write_config([], extra=extra)
    assert f"start {job.timer}" in scenario.sync()
    record = scenario.wait_finished(job, LEAD + 40)
    journal = scenario.journal_of(job)
    print(journal)
    assert record["result"] == "success", record
    assert f"venv-job prefix={VENV} pandas=False" in journal
    assert "venv-job spooled=True" in journal
    msg = scenario.wait_message("slack", "venv_job.done", timeout=30)["text"]
    assert "from its own venv" in msg
