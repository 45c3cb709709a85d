"""The dead-man check and the refresh on a real systemd (issue 5, cases 6 and 8)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from tests.fakes.pgserver import free_port

from .container import boot_refresh_over
from .scenario import UNIT_DIR, Job, Scenario, instant_in, instant_today_in, iso

pytestmark = pytest.mark.e2e


def test_run_whose_timer_was_removed_by_hand_is_reported_missed_once(
    scenario: Scenario,
) -> None:
    with scenario.refresh_held():  # else a refresh could put the timer back
        check_vanished_run_is_reported_once(scenario)


def check_vanished_run_is_reported_once(scenario: Scenario) -> None:
    box = scenario.box
    # grace 1s + timeout 1s + [watch] slack_sec 2: missed 4 s after the instant.
    job = Job("vanished", instant_in(5), ["ok"], {"grace": "1s", "timeout": "1s"})
    scenario.schedule([job], horizon=2)
    box.systemctl("stop", job.timer)
    box.run(["rm", "-f", f"{UNIT_DIR}/{job.timer}", f"{UNIT_DIR}/{job.service}",
             f"{UNIT_DIR}/timers.target.wants/{job.timer}"])
    box.systemctl("daemon-reload")

    time.sleep(max(0.0, job.instant.timestamp() + 5 - time.time()))
    for _ in range(2):  # the packaged unit (as market-deadman.timer runs it), then by hand
        start_deadman(box)
        box.run(["market-timers", "deadman"])
    alert = scenario.wait_message("telegram", "vanished did not run", timeout=30)["text"]
    print(alert)
    assert alert.startswith(f"[CRITICAL] vanished did not run for session {job.session}")
    assert f"was due at {iso(job.instant)} and has no run record" in alert
    for _ in range(2):
        box.systemctl("start", "market-deadman.service")
        box.run(["market-timers", "deadman"])
    assert len(scenario.messages("telegram", "vanished did not run")) == 1
    # `journalctl MARKET_JOB=` finds the dead-man's miss and the alert's lines, as it finds the
    # job's own (the journal of the job's unit itself stays empty: it never ran)
    def about() -> str:
        return box.run(["journalctl", "--no-pager", "-o", "cat", f"MARKET_JOB={job.name}",
                        f"MARKET_SESSION={job.session}"]).stdout

    # waited for: a loaded journald writes them a little later (one CI run read none)
    box.wait_for(lambda: "has no run record" in (t := about()) and "spooled for" in t, 30,
                 "the miss and its alert in the journal", interval=0.5,
                 detail=lambda: f"journalctl MARKET_JOB={job.name} MARKET_SESSION="
                                f"{job.session}:\n{about()}")
    assert scenario.run_record(job) is None and scenario.journal_of(job).strip() == ""
    assert box.show("market-deadman.service", "Result") == "success"


def test_closure_added_to_the_config_removes_the_session_timer_unfired_and_alerts_the_diff(
    scenario: Scenario,
) -> None:
    box = scenario.box
    # market-refresh.timer also runs the refresh 1 min after boot (OnBootSec=): the `start` below
    # would join that run, made with the old config, and it would find nothing to do.
    boot_refresh_over(box)
    job = Job("closing", instant_today_in(15), ["ok"])
    following = Job("closing", job.instant + timedelta(days=1), ["ok"])
    scenario.schedule([job], horizon=2)
    assert scenario.timer_row(job) is not None

    closure = f'\n[overrides."24/7"]\nclosed = ["{job.session}"]\n'
    scenario.write_config([job], horizon=2, extra=closure)
    box.systemctl("start", "market-refresh.service")  # what market-refresh.timer runs daily
    assert box.show("market-refresh.service", "Result") == "success"
    assert time.time() < job.instant.timestamp(), "the refresh ended after the instant"

    assert scenario.timer_row(job) is None, f"{job.timer} still listed"
    assert not box.exists(f"{UNIT_DIR}/{job.timer}") and not box.exists(f"{UNIT_DIR}/{job.service}")
    assert scenario.timer_row(following) is not None, "the next session's timer went too"

    time.sleep(max(0.0, job.instant.timestamp() + 2 - time.time()))
    assert scenario.run_record(job) is None, "the closed session's job ran"
    assert scenario.journal_of(job).strip() == ""

    # The refresh has no network: it spools, the outbox (timer, or by hand) delivers.
    alert = scenario.wait_message("slack", "calendar changed", timeout=90,
                                  poll=scenario.flush_outbox)["text"]
    print(alert)
    assert alert.startswith(f"[WARNING] 24/7 {job.session}: calendar changed")
    assert (f"24/7 {job.session}: closed, was a session (closing was due {iso(job.instant)})"
            in alert)


PAGE_DIR = "/var/lib/market-timers-www"  # page_dir's default: the package makes it


def test_the_dead_man_writes_the_page_where_www_data_serves_it_and_nothing_else(
    scenario: Scenario,
) -> None:
    """The man page's way to serve the page: www-data reads the page's own directory (here
    through Python's http.server on loopback) and nothing of the state directory."""
    box = scenario.box
    job = Job("served", instant_in(900), ["ok"])
    scenario.schedule([job], horizon=2)
    start_deadman(box)
    listing = box.run(["stat", "-c", "%a %U %G", PAGE_DIR]).stdout.split()
    assert listing == ["750", "market-timers", "www-data"]
    assert box.run(["ls", PAGE_DIR]).stdout.split() == ["status.html"]  # a pass's temp file: a dot name

    # the container shares the host's network with the other containers of `make test`: a
    # fixed port served (and fetched) another container's page
    port = free_port()
    box.run(["systemd-run", "--unit=mt-page-http", "--uid=www-data", "--gid=www-data",
             "/usr/bin/python3", "-m", "http.server",
             "--bind", "127.0.0.1", "--directory", PAGE_DIR, str(port)])
    fetch = ["runuser", "-u", "www-data", "--", "/usr/bin/python3", "-c",
             "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
             f"'http://127.0.0.1:{port}/status.html', timeout=5).read().decode())"]
    try:
        page = box.wait_for(lambda: box.run(fetch, check=False).stdout, 30,
                            "the page served on loopback", interval=0.5)
    finally:
        box.systemctl("stop", "mt-page-http.service", check=False)
    assert f'data-job="{job.name}"' in page and f'data-session="{job.session}"' in page

    # www-data reads nothing of the scheduler's own state
    for path in ("/var/lib/market-timers", "/var/lib/market-timers/plan.json",
                 "/var/lib/market-timers/deadman.json", "/var/spool/market-timers/outbox"):
        denied = box.run(["runuser", "-u", "www-data", "--", "cat", path], check=False)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, (path, denied)


def start_deadman(box) -> None:
    """`systemctl start market-deadman.service`, once more if it met its own timer's run.

    In these nspawn containers (cgroup v1 hybrid host) a start right as the previous run of the
    unit ends can fail with 219/CGROUP ("Failed to attach to cgroup": the old cgroup was still
    being removed, EIO). That is the container's cgroup set-up, not the package: the deadman
    timer runs it again a minute later anyway. Any other failure still fails the test."""
    result = box.systemctl("start", "market-deadman.service", check=False)
    if result.returncode != 0:
        status = box.show("market-deadman.service", "ExecMainStatus")
        assert status == "219", f"market-deadman.service failed: {result.stderr}"
        time.sleep(1)
        box.systemctl("reset-failed", "market-deadman.service", check=False)
        box.systemctl("start", "market-deadman.service")
