"""Drop-ins on a real systemd (issue 22): a directive the config does not offer (CPUQuota=,
MemoryMax=, Nice=, Environment=, CPUSchedulingPolicy=) goes in
/etc/systemd/system/market-<job>@.service.d/*.conf, and systemd applies it to every session's
unit of the job (market-<job>@<instance>.service). README, "Adding a directive the config does not
offer: drop-ins".

What a user must see: `systemctl show` of each session's unit has the directives, whether the
drop-in was written before `market-timers sync` or after it (with a daemon-reload), and a run of
the job gets them: its environment, its nice value and its scheduling policy, also when its timer
pre-fired (`lead`: the unit's own Nice=-10 is the runner's wait's, never the job's, and the
runner undoes nothing a drop-in set). The job writes what it got to a file (not the journal,
which may attribute a line of a process that exits right after logging to no unit, #2913).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest

from .scenario import (
    JOB,
    JOB_HOME,
    JOBS_DIR,
    UNIT_DIR,
    Job,
    Scenario,
    instant_in,
    toml_value,
)

pytestmark = pytest.mark.e2e

PROBE = f"{JOBS_DIR}/dropin-probe"
OUT_DIR = f"{JOB_HOME}/e2e-dropins"  # the job user's home: writable by the job
PYTHON = "/opt/venvs/market-timers/bin/python3"
PROBE_SCRIPT = f'''#!{PYTHON}
"""e2e drop-in probe: what the job got from its unit and its drop-ins, in a file."""
import json
import os
import time

start = time.time()
with open("/proc/self/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()  # fields 3... of proc(5); nice is field 19
time.sleep(0.5)  # past the real-time escort's hold (100 ms after the instant)
got = dict(start=start, nice=os.getpriority(os.PRIO_PROCESS, 0), stat_nice=int(fields[16]),
           dropin_seen=os.environ.get("DROPIN_SEEN"), policy=os.sched_getscheduler(0))
os.makedirs("{OUT_DIR}", exist_ok=True)
with open(f"{OUT_DIR}/{{os.environ['MARKET_JOB']}}.json", "w") as f:
    json.dump(got, f)
'''
LIMITS = "[Service]\nCPUQuota=50%\nMemoryMax=200M\nNice=5\nEnvironment=DROPIN_SEEN=yes\n"
SHOWN = {"CPUQuotaPerSecUSec": "500ms", "MemoryMax": str(200 * 1024 * 1024), "Nice": "5"}
LEAD = 12  # seconds from now to the instants: sync of a few jobs takes one or two


@dataclass
class ProbeJob(Job):
    """A session job of the 24/7 calendar that runs the probe."""

    def toml(self) -> str:
        return super().toml().replace(f"command = {toml_value([JOB, *self.args])}",
                                      f"command = {toml_value([PROBE, *self.args])}")


PRE_FIRED = {"lead": None}  # the default lead, 2 s (the scenario's jobs have lead = "0s")


@pytest.fixture
def dropins(scenario: Scenario):
    """write(path, text): a drop-in; removed with its directory (and systemd reloaded) after."""
    box = scenario.box
    box.write_file(PROBE, PROBE_SCRIPT, mode=0o755)
    box.run(["rm", "-rf", OUT_DIR])
    written: list[str] = []

    def write(path: str, text: str) -> None:
        box.write_file(path, text)
        written.append(os.path.dirname(path))

    yield write
    box.run(["rm", "-rf", OUT_DIR, *written])
    box.systemctl("daemon-reload")


def services(scenario: Scenario, job: str) -> list[str]:
    """Every session's service unit of the job that sync wrote."""
    out = scenario.box.run(["sh", "-c", f"cd {UNIT_DIR} && ls market-{job}@*.service"]).stdout
    return out.split()


def show(scenario: Scenario, unit: str) -> dict[str, str]:
    props = ["CPUQuotaPerSecUSec", "MemoryMax", "Nice", "Environment", "DropInPaths",
             "CPUSchedulingPolicy"]
    out = scenario.box.systemctl("show", *(f"--property={p}" for p in props), unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def assert_every_session_has_the_limits(scenario: Scenario, job: str, conf: str) -> None:
    units = services(scenario, job)
    assert len(units) >= 2, f"sync wrote {units}: at least two sessions' units expected"
    for unit in units:
        got = show(scenario, unit)
        print(f"[e2e] {unit}: {got}")
        assert {k: got.get(k) for k in SHOWN} == SHOWN, unit
        assert "DROPIN_SEEN=yes" in got["Environment"].split(), unit
        assert conf in got["DropInPaths"].split(), unit


def what_the_run_got(scenario: Scenario, job: Job) -> tuple[dict, dict]:
    """The run's record (ExecStopPost= wrote it: the run is over) and what the probe wrote."""
    record = scenario.wait_finished(job, LEAD + 30)
    assert record["result"] == "success", scenario.journal_of(job)
    return record, json.loads(scenario.box.read_file(f"{OUT_DIR}/{job.name}.json"))


def test_a_drop_in_applies_to_every_session_and_its_nice_survives_the_pre_fire(
        scenario: Scenario, dropins) -> None:
    instant = instant_in(LEAD)
    pre_fired = ProbeJob("dropin", instant, [], PRE_FIRED)
    no_lead = ProbeJob("nolead", instant, [])
    minus_five = ProbeJob("negfive", instant, [], PRE_FIRED)
    # The pre-fire's own value, set by a drop-in: in a dash-prefix directory under /run, beside a
    # same-named file under /usr/local that it hides (nice.conf: Nice=7 is not applied).
    minus_ten = ProbeJob("neg-ten", instant, [], PRE_FIRED)
    plain = ProbeJob("plain", instant, [], PRE_FIRED)  # no drop-in: the control
    etc = UNIT_DIR
    dropins(f"{etc}/market-dropin@.service.d/limits.conf", LIMITS)
    dropins(f"{etc}/market-dropin@.service.d/sched.conf", "[Service]\nCPUSchedulingPolicy=batch\n")
    dropins(f"{etc}/market-nolead@.service.d/limits.conf", LIMITS)
    dropins(f"{etc}/market-negfive@.service.d/nice.conf", "[Service]\nNice=-5\n")
    dropins("/run/systemd/system/market-neg-.service.d/nice.conf", "[Service]\nNice=-10\n")
    dropins("/usr/local/lib/systemd/system/market-neg-ten@.service.d/nice.conf",
            "[Service]\nNice=7\n")
    dropins(f"{etc}/market-neg-ten@.service.d/seen.conf",
            "[Service]\nEnvironment=DROPIN_SEEN=yes\n")
    scenario.box.systemctl("daemon-reload")
    scenario.schedule([pre_fired, no_lead, minus_five, minus_ten, plain], horizon=3)

    assert_every_session_has_the_limits(scenario, "dropin",
                                        f"{etc}/market-dropin@.service.d/limits.conf")
    assert_every_session_has_the_limits(scenario, "nolead",
                                        f"{etc}/market-nolead@.service.d/limits.conf")
    for unit in services(scenario, "dropin"):
        assert show(scenario, unit)["CPUSchedulingPolicy"] in ("3", "batch"), unit
    unit = minus_ten.service
    systemd_reads = show(scenario, unit)["DropInPaths"].split()
    runner_reads = scenario.box.run([PYTHON, "-c", "from market_timers.runner.nice import "
                                     f"dropin_files; print(' '.join(dropin_files({unit!r})))"]
                                    ).stdout.split()
    print(f"[e2e] {unit}: systemd reads {systemd_reads}, the runner {runner_reads}")
    assert runner_reads == systemd_reads  # the same files, in the same order
    assert show(scenario, unit)["Nice"] == "-10"

    record, got = what_the_run_got(scenario, pre_fired)
    print(f"[e2e] {pre_fired.service}: {got}, late_sec {record['late_sec']}")
    assert record["late_sec"] < 0  # claimed before its instant: the timer pre-fired
    assert (got["nice"], got["stat_nice"], got["dropin_seen"]) == (5, 5, "yes")
    assert got["policy"] == os.SCHED_BATCH  # the escort gave it back after the instant
    assert got["start"] >= instant.timestamp()

    record, got = what_the_run_got(scenario, no_lead)
    assert record["late_sec"] >= 0
    assert (got["nice"], got["stat_nice"], got["dropin_seen"]) == (5, 5, "yes")

    for job, nice in ((minus_five, -5), (minus_ten, -10)):
        record, got = what_the_run_got(scenario, job)
        print(f"[e2e] {job.service}: {got}, late_sec {record['late_sec']}")
        assert record["late_sec"] < 0
        assert (got["nice"], got["stat_nice"]) == (nice, nice), job.name
    assert got["dropin_seen"] == "yes"

    record, got = what_the_run_got(scenario, plain)
    assert record["late_sec"] < 0
    assert (got["nice"], got["dropin_seen"], got["policy"]) == (0, None, os.SCHED_OTHER)
    assert show(scenario, plain.service)["Nice"] == "-10"  # the runner's wait, not the job


def test_a_drop_in_written_after_sync_applies_after_a_daemon_reload(
        scenario: Scenario, dropins) -> None:
    job = ProbeJob("later", instant_in(LEAD), [], PRE_FIRED)
    scenario.schedule([job], horizon=3)
    assert all(show(scenario, unit)["Nice"] == "-10" for unit in services(scenario, "later"))
    conf = f"{UNIT_DIR}/market-later@.service.d/limits.conf"
    dropins(conf, LIMITS)
    scenario.box.systemctl("daemon-reload")
    assert_every_session_has_the_limits(scenario, "later", conf)

    record, got = what_the_run_got(scenario, job)
    assert record["late_sec"] < 0
    assert (got["nice"], got["stat_nice"], got["dropin_seen"]) == (5, 5, "yes")
