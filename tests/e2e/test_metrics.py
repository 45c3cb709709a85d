"""The Prometheus textfile on a real systemd (issue 15, section 3): after real runs of the
package's units, node_exporter's directory holds a file that parses and tells what happened.

The directory is made the way README tells an operator to (writable by the package's group);
node_exporter itself is not needed to check the file.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .scenario import Job, Scenario, instant_in
from .test_watch import start_deadman

pytestmark = pytest.mark.e2e

LEAD = 6
PROM_DIR = "/var/lib/prometheus/node-exporter"
PROM = f"{PROM_DIR}/market_timers.prom"


def scrape(scenario: Scenario) -> dict[tuple, float]:
    text = scenario.box.read_file(PROM)
    return {(s.name, *sorted(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture
def node_exporter_dir(scenario: Scenario):
    scenario.box.run(["install", "-d", "-o", "root", "-g", "market-timers", "-m", "0775",
                      PROM_DIR])
    yield PROM_DIR
    scenario.box.run(["rm", "-rf", "/var/lib/prometheus", "/var/lib/market-timers/metrics"],
                     check=False)


def test_after_real_runs_the_textfile_tells_what_happened(scenario: Scenario,
                                                          node_exporter_dir: str) -> None:
    ok = Job("mticks", instant_in(LEAD), ["ok"])
    bad = Job("mfails", ok.instant + timedelta(seconds=1), ["fail", "3"])
    scenario.schedule([ok, bad])
    assert scenario.box.exists(PROM), "sync did not write the metrics file"
    first = scrape(scenario)
    assert first[("market_timers_job_next_fire_timestamp_seconds", ("market_job", "mticks"))] \
        == ok.instant.timestamp()
    assert first[("market_timers_job_runs_total", ("market_job", "mticks"))] == 0
    # 24/7 has no holidays, so its data has no end: no series for it
    assert ("market_timers_calendar_data_end_timestamp_seconds", ("calendar", "24/7")) not in first
    synced = first[("market_timers_last_sync_timestamp_seconds",)]
    assert abs(synced - datetime.now(UTC).timestamp()) < 120

    record = scenario.wait_finished(ok, LEAD + 20)
    scenario.wait_finished(bad, LEAD + 20)

    def both_counted():
        m = scrape(scenario)
        done = all(m.get(("market_timers_job_runs_total", ("market_job", j))) == 1
                   for j in ("mticks", "mfails"))
        return m if done else None

    # ExecStopPost= writes the file as the unit stops, after the record's result.
    m = scenario.box.wait_for(both_counted, 15, "both runs in the metrics", interval=0.3)
    print(scenario.box.read_file(PROM))
    started = datetime.fromisoformat(record["started_utc"]).timestamp()
    assert m[("market_timers_job_last_start_timestamp_seconds", ("market_job", "mticks"))] \
        == pytest.approx(started, abs=0.002)
    late = m[("market_timers_job_last_lateness_seconds", ("market_job", "mticks"))]
    assert late == record["late_sec"] and late >= 0
    assert m[("market_timers_job_last_end_timestamp_seconds", ("market_job", "mticks"))] >= started
    assert m[("market_timers_job_last_result", ("kind", "ok"), ("market_job", "mticks"))] == 1
    assert m[("market_timers_job_last_result", ("kind", "failed"), ("market_job", "mfails"))] == 1
    assert m[("market_timers_job_last_exit_status", ("market_job", "mfails"))] == 3
    assert m[("market_timers_job_failures_total", ("kind", "failed"),
              ("market_job", "mfails"))] == 1
    assert m[("market_timers_job_failures_total", ("kind", "failed"),
              ("market_job", "mticks"))] == 0
    assert m[("market_timers_job_sessions_missed_total", ("market_job", "mticks"))] == 0
    # horizon 2: the next fire is the next day's session
    assert m[("market_timers_job_next_fire_timestamp_seconds", ("market_job", "mticks"))] \
        == (ok.instant + timedelta(days=1)).timestamp()
    assert ("market_timers_outbox_alerts", ("channel", "telegram"), ("state", "pending")) in m

    stat = scenario.box.run(["stat", "-c", "%a %U", PROM]).stdout.strip()
    assert stat == "644 market-timers"
    assert scenario.box.run(["ls", "-A", PROM_DIR]).stdout.split() == ["market_timers.prom"]

    # The dead-man unit (its sandbox, its user) rewrites it too: started here rather than
    # waited for (its timer runs every minute); start_deadman() starts it once more if it met
    # the timer's own run (219/CGROUP in systemd-nspawn while that run's cgroup is removed).
    before = m[("market_timers_metrics_generated_timestamp_seconds",)]
    ended = float(scenario.box.run(["date", "+%s"]).stdout)

    def rewritten_by_deadman():
        after = scrape(scenario)
        return after if after[("market_timers_metrics_generated_timestamp_seconds",)] > \
            max(before, ended) else None

    time.sleep(max(0.0, ended + 1.1 - time.time()))  # the file's stamp has whole seconds
    start_deadman(scenario.box)
    after = scenario.box.wait_for(rewritten_by_deadman, 90, "the dead-man pass to rewrite it",
                                  interval=1)
    assert after[("market_timers_job_runs_total", ("market_job", "mfails"))] == 1  # not twice


def test_a_pre_fired_job_starts_at_its_instant_and_its_timer_shows_the_lead(
        scenario: Scenario) -> None:
    """The default lead (2s): the timer fires 2 s early, the runner records, locks and waits on
    the realtime clock; the job's first line comes after the instant, never before."""
    from .scenario import utc_text

    job = Job("prefired", instant_in(LEAD + 3), ["ok"], {"lead": None})
    scenario.schedule([job])
    row = scenario.timer_row(job)
    assert row is not None and row.startswith(utc_text(job.instant - timedelta(seconds=2))), row
    record = scenario.wait_finished(job, LEAD + 25)
    assert record["result"] == "success" and record["late_sec"] < 0  # recorded before the wait
    lines = scenario.journal_of(job)
    start = float(lines.split("e2e-job start=")[1].split()[0])
    print(f"[e2e] pre-fired {job.service}: the job started {(start - job.instant.timestamp()) * 1000:.1f} ms after its instant")
    assert start >= job.instant.timestamp()  # the wait ended at the instant, not before
