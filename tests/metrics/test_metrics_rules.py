"""The example alerting rules: valid for Prometheus (`promtool check rules`), and they fire on the
series market-timers writes, and only then (`promtool test rules`).

promtool comes with Debian's `prometheus` package (.ci/run installs it). Under CI=true its
absence is a failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "scripts" / "examples" / "market-timers.rules.yml"


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not installed (apt install prometheus)")
        pytest.skip("promtool is not installed (apt install prometheus)")
    return path


def test_the_rules_file_is_valid(promtool):
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


# Each case: input series over 10 minutes (one sample a minute), then what fires at the end.
CASES = """
rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'market_timers_job_sessions_missed_total{{market_job="signal",instance="h"}}'
        values: '0 0 0 0 0 0 0 0 1 1 1'
      - series: 'market_timers_job_sessions_missed_total{{market_job="report",instance="h"}}'
        values: '0 0 0 0 0 0 0 0 0 0 0'
    alert_rule_test:
      - eval_time: 10m
        alertname: MarketTimersJobMissedSession
        exp_alerts:
          - exp_labels: {{severity: critical, market_job: signal, instance: h}}
            exp_annotations:
              summary: "market-timers: signal missed a session on h"
              description: "signal has a planned run with no run record past its deadline. See `market-timers status` and `journalctl MARKET_JOB=signal`."
      - eval_time: 5m
        alertname: MarketTimersJobMissedSession
        exp_alerts: []

  - interval: 1m
    input_series:
      - series: 'market_timers_job_failures_total{{market_job="orders",kind="failed",instance="h"}}'
        values: '0 0 0 0 1 1 1 1 1 1 1'
      - series: 'market_timers_job_failures_total{{market_job="orders",kind="timeout",instance="h"}}'
        values: '0x10'
      # the last refresh at t=0; evaluated 25 h and 27 h later
      - series: 'market_timers_last_refresh_timestamp_seconds{{instance="h"}}'
        values: '0x1700'
    alert_rule_test:
      - eval_time: 10m
        alertname: MarketTimersJobFailed
        exp_alerts:
          - exp_labels: {{severity: critical, market_job: orders, kind: failed, instance: h}}
            exp_annotations:
              summary: "market-timers: orders failed (failed) on h"
              description: "A run of orders ended as failed. See `market-timers status` and `journalctl MARKET_JOB=orders`."
      - eval_time: 3m
        alertname: MarketTimersJobFailed
        exp_alerts: []
      - eval_time: 1500m
        alertname: MarketTimersRefreshStale
        exp_alerts: []
      - eval_time: 1620m
        alertname: MarketTimersRefreshStale
        exp_alerts:
          - exp_labels: {{severity: warning, instance: h}}
            exp_annotations:
              summary: "market-timers: no successful refresh for over 26 hours on h"
              description: "See `systemctl status market-refresh.service` and run `market-timers sync`."

  - interval: 1m
    input_series:
      # raised at t=0 and still pending; another channel's alert raised at 9m
      - series: 'market_timers_outbox_oldest_alert_timestamp_seconds{{channel="telegram",state="pending",instance="h"}}'
        values: '0x20'
      - series: 'market_timers_outbox_oldest_alert_timestamp_seconds{{channel="slack",state="pending",instance="h"}}'
        values: '540x20'
      - series: 'market_timers_outbox_alerts{{channel="email",state="undeliverable",instance="h"}}'
        values: '0 0 0 0 0 1 1 1 1 1 1'
      - series: 'market_timers_outbox_alerts{{channel="slack",state="undeliverable",instance="h"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 18m
        alertname: MarketTimersOutboxStuck
        exp_alerts:
          - exp_labels: {{severity: critical, channel: telegram, state: pending, instance: h}}
            exp_annotations:
              summary: "market-timers: alerts to telegram stuck in the outbox on h"
              description: "The oldest alert pending for telegram was raised 18m 0s ago. See `market-timers outbox list` and `systemctl status market-outbox.service`."
      - eval_time: 14m
        alertname: MarketTimersOutboxStuck
        exp_alerts: []
      - eval_time: 10m
        alertname: MarketTimersAlertUndeliverable
        exp_alerts:
          - exp_labels: {{severity: critical, channel: email, state: undeliverable, instance: h}}
            exp_annotations:
              summary: "market-timers: 1 undeliverable alert(s) for email on h"
              description: "See `market-timers outbox list`: every channel of these alerts failed."

  - interval: 1m
    input_series:
      # XNYS data ends 20 days after t=0, XLON 40 days after
      - series: 'market_timers_calendar_data_end_timestamp_seconds{{calendar="XNYS",instance="h"}}'
        values: '1728000x10'
      - series: 'market_timers_calendar_data_end_timestamp_seconds{{calendar="XLON",instance="h"}}'
        values: '3456000x10'
      - series: 'market_timers_metrics_generated_timestamp_seconds{{instance="h"}}'
        values: '0 60 120 180 180 180 180 180 180 180 180 180 180 180 180 180'
    alert_rule_test:
      - eval_time: 0m
        alertname: MarketTimersCalendarDataEnding
        exp_alerts:
          - exp_labels: {{severity: warning, calendar: XNYS, instance: h}}
            exp_annotations:
              summary: "market-timers: calendar XNYS data ends in less than 30 days on h"
              description: "The installed exchange_calendars knows XNYS only until 20d 0h 0m 0s from now. Upgrade the market-timers package."
      - eval_time: 12m
        alertname: MarketTimersMetricsStale
        exp_alerts: []
      - eval_time: 14m
        alertname: MarketTimersMetricsStale
        exp_alerts:
          - exp_labels: {{severity: warning, instance: h}}
            exp_annotations:
              summary: "market-timers: metrics not updated for 10 minutes on h"
              description: "Is market-deadman.timer running? `systemctl status market-deadman.timer`"
"""


def test_the_rules_fire_on_our_series_and_only_then(promtool, tmp_path):
    tests = tmp_path / "tests.yml"
    tests.write_text(textwrap.dedent(CASES).format(rules=RULES))
    done = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_use_metrics_the_package_writes():
    """A rule on a metric name nobody writes would never fire."""
    import re

    from market_timers import metrics

    names = {metrics.PREFIX + n for n in _family_names(metrics)}
    used = set(re.findall(r"market_timers_[a-z_]+", RULES.read_text()))
    assert used and used <= names, sorted(used - names)


def _family_names(metrics) -> set[str]:
    from datetime import UTC, datetime

    from market_timers.config import loader as config
    from market_timers.schema.problems import Problems

    cfg = config.parse({"state_dir": "/nonexistent", "spool_dir": "/nonexistent"},
                       Problems("x"))
    return {f.name for f in metrics.collect(cfg, datetime(2025, 1, 1, tzinfo=UTC),
                                            _NoState())}


class _NoState:
    state_dir = "/nonexistent"
    dir = Path("/nonexistent/metrics")

    def read(self, name):
        return {}

    def write(self, name, doc):
        pass
