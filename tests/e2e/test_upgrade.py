"""Upgrading an installed 0.1 package (issue 29): the ledger and the history are kept, and a
session that ran before the upgrade is still "already ran" after it, although the jobs now run
as their own user and the scheduler's files moved; the data a job kept under its read_write_paths
as 0.1's user is still there and its own (issue 41)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from .conftest import PACKAGE
from .container import Container
from .debpkg import RELEASE_0_1, released_deb
from .rootfs import Release
from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

RELEASED = RELEASE_0_1  # built beforehand by the deb_path fixture (conftest.py)
GATEWAY = "e2e-gateway-up"
DATA = "/var/lib/e2e-orders-data"  # a job's data directory of 0.1 (its read_write_paths)
SENT = f"{DATA}/sent"
KEEP_CONFFILES = ["-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]


def test_an_upgrade_from_0_1_keeps_the_ledger_and_a_session_that_ran_stays_ran(
    container: Container, scenario: Scenario, release: Release, deb_inside: str
) -> None:
    old = container.copy_in(released_deb(RELEASED, release.suite))
    container.run(["apt-get", "purge", "-y", "-q", PACKAGE], timeout=300)
    container.apt_install(old, *KEEP_CONFFILES)
    try:
        upgrade_from_0_1(container, scenario, deb_inside)
    finally:  # never leave 0.1 behind for the container's next test
        scenario.sync_options = ["-v"]
        version = container.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE]).stdout
        if version.startswith("0.1.0"):
            container.apt_install(deb_inside, *KEEP_CONFFILES)


def upgrade_from_0_1(container: Container, scenario: Scenario, deb_inside: str) -> None:
    version = container.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE]).stdout
    assert version.startswith("0.1.0"), version

    # 0.1's jobs ran as the package's user, so its admin made their data directories its own
    container.run(["rm", "-rf", DATA])
    container.run(["install", "-d", "-o", "market-timers", "-g", "market-timers", "-m", "0750",
                   DATA])
    job = Job("orders", instant_in(8), ["append", SENT], {"read_write_paths": [DATA]})
    scenario.sync_options = []  # 0.1's sync has no -v (and prints every unit)
    # 0.1 ran its runner as the job's user: a `user =` other than the package's own cannot reach
    # the ledger there. Its jobs named none; after the upgrade each job gets a user of its own.
    scenario.shared_user = ""
    with scenario.refresh_held():  # the package's own refresh, started by its postinst, first
        scenario.schedule([job])
    before = scenario.wait_finished(job, 40)
    assert before["result"] == "success"
    attempts = scenario.ledger(job)["attempts"]
    assert len(attempts) == 1

    # A gateway that 0.1 told to join the package's group to spool events (issue 41: the spool
    # has a group of its own now): the upgrade adds it there, so that it keeps spooling.
    if container.run(["id", GATEWAY], check=False).returncode != 0:
        container.run(["useradd", "--system", "--no-create-home", GATEWAY])
    container.run(["usermod", "-a", "-G", "market-timers", GATEWAY])
    container.run(["gpasswd", "-d", GATEWAY, "market-timers-spool"], check=False)

    container.apt_install(deb_inside, *KEEP_CONFFILES)
    scenario.sync_options = ["-v"]
    assert "market-timers-spool" in container.run(["id", "-nG", GATEWAY]).stdout.split()
    spooled = container.run(["runuser", "-u", GATEWAY, "--", "market-timers", "event",
                             "upgraded", "--key", "gw-up"], check=False, timeout=60)
    assert spooled.returncode == 0, spooled.stderr
    container.run(["gpasswd", "-d", GATEWAY, "market-timers"])  # as postinst advises
    version = container.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE]).stdout
    assert not version.startswith("0.1.0"), f"not upgraded: {version}"

    assert scenario.ledger(job)["attempts"] == attempts
    assert scenario.run_record(job)["result"] == "success"
    again = container.run(["market-timers", "run", job.name, "--session",
                           job.session.isoformat()], check=False)
    assert again.returncode == 2, again.stdout + again.stderr
    assert f"orders already ran for session {job.session}" in again.stdout + again.stderr
    # And the upgraded package still runs the next fire of a job, as its new user.
    nxt = Job("orders2", instant_in(8), ["ok"])
    with scenario.refresh_held():  # the upgrade's refresh re-synced the old config first
        scenario.schedule([nxt], extra="\n" + job.toml())
    assert scenario.wait_finished(nxt, 40)["result"] == "success"
    assert "user=market-timers" not in scenario.journal_of(nxt)
    keeps_the_jobs_data(container, scenario, job)


def keeps_the_jobs_data(container: Container, scenario: Scenario, job: Job) -> None:
    """The file the job wrote as 0.1's user: kept, its own user's, and written again by it."""
    owner = container.run(["stat", "-c", "%U", DATA, SENT]).stdout.split()
    assert owner == ["market-job-orders"] * 2, owner
    yesterday = (job.session - timedelta(days=1)).isoformat()  # today's ran before the upgrade
    container.run(["market-timers", "run", job.name, "--session", yesterday], timeout=120)
    container.wait_for(lambda: (scenario.record_of(job.name, yesterday) or {}).get("result"),
                       60, "the run of yesterday's session to finish", interval=0.3)
    assert scenario.record_of(job.name, yesterday)["result"] == "success"
    assert container.read_file(SENT).splitlines() == ["sent attempt=1"] * 2
    ran = container.journal(f"MARKET_JOB={job.name}", f"MARKET_SESSION={yesterday}",
                            "_TRANSPORT=stdout", "-o", "cat")
    assert "user=market-job-orders" in ran, ran
