"""`market-timers run JOB --from D1 [--to D2]`: a backfill, one session at a time, in order."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pytest

from market_timers import cli, ledger
from market_timers.config import loader as config
from market_timers.contracts import exitcodes, unitname
from market_timers.controls import backfill
from market_timers.ledger.local import LocalLedger

CONFIG = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/bin/true"]
requires = ["signal"]
[[job]]
name = "statement"
event = "close"
offset = "+30min"
command = ["/bin/true"]
requires = ["closing-orders"]
[[job]]
name = "nightly"
at = "23:00 UTC"
command = ["/bin/true"]
"""
# XNYS, the week of Thanksgiving 2025: 24, 25, 26 (28 is a half day, 27 closed), then 1 Dec
NOW = datetime(2025, 12, 2, 12, 0, tzinfo=UTC)


class FakeSystemd:
    """systemctl at the seam manual_run uses: start() queues the one-off unit; the next show()
    sees it active, the one after runs it to its end as the runner and its record step would
    (attempt 1 in the ledger, then how it ended). A start while another run has not ended fails
    the test: the backfill must wait."""

    def __init__(self, cfg, fail: dict | None = None):
        self.book = LocalLedger(str(cfg.state_dir))
        self.fail = fail or {}  # (job, session iso) -> exit status
        self.started: list[str] = []
        self.running: str | None = None
        self.polls = 0

    def start(self, units):
        [unit] = units
        assert self.running is None, f"{unit} started while {self.running} had not ended"
        self.started.append(unit)
        self.running, self.polls = unit, 0

    def show(self, units, props):
        [unit] = units
        assert unit == self.running
        self.polls += 1
        if self.polls == 1:
            return {unit: {"ActiveState": "active", "InvocationID": "inv"}}
        parsed = unitname.parse(unit)
        key = ledger.Key(parsed.job, parsed.session)
        self.book.claim(key, "operator", {"host": "ny4-a", "pid": 4242, "invocation": unit,
                                          "started_utc": "2025-12-02T12:00:00.000Z"})
        status = self.fail.get((parsed.job, parsed.session))
        self.book.finish(key, unit, {"result": "exit-code" if status else "success",
                                     "exit_code": "exited", "exit_status": status or "0",
                                     "finished_utc": "2025-12-02T12:00:05.000Z"})
        self.running = None
        state = "failed" if status else "inactive"
        return {unit: {"ActiveState": state, "InvocationID": "inv",
                       "Result": "exit-code" if status else "success"}}

    def runs(self) -> list[tuple[str, str]]:
        return [(u.job, u.session) for u in map(unitname.parse, self.started)]


@pytest.fixture
def cfg(write_config):
    return config.load(write_config(CONFIG))


def run(cfg, tmp_path, job="closing-orders", start=date(2025, 11, 24), end=date(2025, 11, 28),
        fake=None, **kw):
    fake = fake or FakeSystemd(cfg)
    code = backfill.command(cfg, job, start, end, now=NOW, systemctl=fake,
                            unit_dir=tmp_path / "run-units", sleep=lambda s: None, **kw)
    return code, fake


def ran_before(cfg, job: str, session: str, result: str = "success") -> None:
    book = LocalLedger(str(cfg.state_dir))
    key = ledger.Key(job, session)
    book.claim(key, "timer", {"host": "ny4-b", "pid": 7, "invocation": "t",
                              "started_utc": f"{session}T20:50:00.000Z"})
    book.finish(key, "t", {"result": result, "exit_status": "0" if result == "success" else "3"})


def test_sessions_run_in_order_one_at_a_time_each_after_the_previous_ended(cfg, tmp_path,
                                                                              capsys):
    code, fake = run(cfg, tmp_path)
    assert code == 0
    assert fake.runs() == [("closing-orders", "2025-11-24"), ("closing-orders", "2025-11-25"),
                           ("closing-orders", "2025-11-26"), ("closing-orders", "2025-11-28")]
    out = capsys.readouterr().out
    assert "2025-11-24  closing-orders: ran ok (market-closing-orders@2025-11-24-run" in out
    assert "summary: 4 ran ok" in out
    for session in ("2025-11-24", "2025-11-25", "2025-11-26", "2025-11-28"):
        [attempt] = LocalLedger(str(cfg.state_dir)).attempts(ledger.Key("closing-orders",
                                                                         session))
        assert attempt["how"] == "operator"


def test_sessions_that_already_ran_are_listed_not_run_again(cfg, tmp_path, capsys):
    ran_before(cfg, "closing-orders", "2025-11-25")
    ran_before(cfg, "closing-orders", "2025-11-28", result="exit-code")
    code, fake = run(cfg, tmp_path)
    assert code == 0
    assert fake.runs() == [("closing-orders", "2025-11-24"), ("closing-orders", "2025-11-26")]
    out = capsys.readouterr().out
    assert ("2025-11-25  closing-orders: already ran (started at 2025-11-25T20:50:00.000Z on "
            "host ny4-b (pid 7, attempt 1, timer): succeeded)") in out
    assert "2025-11-28  closing-orders: already ran (started at" in out
    assert "failed (exit 3))" in out
    assert "summary: 2 ran ok, 2 already ran" in out


def test_the_first_failed_run_stops_the_backfill_naming_it_and_what_did_not_run(cfg, tmp_path,
                                                                                capsys):
    fake = FakeSystemd(cfg, fail={("closing-orders", "2025-11-25"): "3"})
    code, fake = run(cfg, tmp_path, fake=fake)
    assert code == exitcodes.FAILURE
    assert fake.runs() == [("closing-orders", "2025-11-24"), ("closing-orders", "2025-11-25")]
    captured = capsys.readouterr()
    assert "2025-11-25  closing-orders: failed (failed (exit 3); see journalctl -u " in captured.out
    assert "2025-11-26  closing-orders: not run (the backfill stopped at the first failure" \
        in captured.out
    assert "2025-11-28  closing-orders: not run" in captured.out
    assert "closing-orders failed for session 2025-11-25" in captured.err


def test_keep_going_runs_the_rest_and_still_exits_non_zero(cfg, tmp_path, capsys):
    fake = FakeSystemd(cfg, fail={("closing-orders", "2025-11-25"): "3"})
    code, fake = run(cfg, tmp_path, fake=fake, keep_going=True)
    assert code == exitcodes.FAILURE
    assert len(fake.runs()) == 4
    assert "summary: 3 ran ok, 1 failed" in capsys.readouterr().out


def test_dry_run_starts_nothing_and_lists_what_would_run(cfg, tmp_path, capsys):
    ran_before(cfg, "closing-orders", "2025-11-25")
    code, fake = run(cfg, tmp_path, dry_run=True)
    assert code == 0 and fake.started == []
    assert not (tmp_path / "run-units").exists()
    out = capsys.readouterr().out
    assert "2025-11-24  closing-orders: would run" in out
    assert "2025-11-25  closing-orders: already ran" in out
    assert "summary: 1 already ran, 3 would run" in out


def test_downstream_runs_the_jobs_that_require_it_in_order_per_session(cfg, tmp_path):
    ran_before(cfg, "statement", "2025-11-25")
    code, fake = run(cfg, tmp_path, job="signal", end=date(2025, 11, 25), downstream=True)
    assert code == 0
    assert fake.runs() == [("signal", "2025-11-24"), ("closing-orders", "2025-11-24"),
                           ("statement", "2025-11-24"),
                           ("signal", "2025-11-25"), ("closing-orders", "2025-11-25")]


def test_downstream_of_a_failed_run_is_skipped(cfg, tmp_path, capsys):
    fake = FakeSystemd(cfg, fail={("signal", "2025-11-24"): "1"})
    code, fake = run(cfg, tmp_path, job="signal", end=date(2025, 11, 25), downstream=True,
                     keep_going=True, fake=fake, as_json=True)
    assert code == exitcodes.FAILURE
    assert fake.runs() == [("signal", "2025-11-24"), ("signal", "2025-11-25"),
                           ("closing-orders", "2025-11-25"), ("statement", "2025-11-25")]
    report = json.loads(capsys.readouterr().out)
    assert [(r["session"], r["job"], r["outcome"]) for r in report["runs"][:3]] == [
        ("2025-11-24", "signal", "failed"), ("2025-11-24", "closing-orders", "skipped"),
        ("2025-11-24", "statement", "skipped")]
    assert report["ok"] is False and report["downstream"] == ["closing-orders", "statement"]


def test_a_range_reaching_a_run_still_to_come_is_refused(cfg, tmp_path, capsys):
    code, fake = run(cfg, tmp_path, end=date(2025, 12, 3))
    assert code == exitcodes.USAGE and fake.started == []
    assert ("the range reaches into the future: closing-orders's run for session 2025-12-02 is "
            "planned for Tue 2025-12-02 20:50:00 UTC, still to come") in capsys.readouterr().err


def test_without_to_the_range_ends_at_the_last_session_before_now(cfg, tmp_path, capsys):
    code, fake = run(cfg, tmp_path, start=date(2025, 11, 28), end=None)
    assert code == 0
    assert fake.runs() == [("closing-orders", "2025-11-28"), ("closing-orders", "2025-12-01")]


def test_bad_ranges_and_jobs_without_sessions_are_refused(cfg, tmp_path, capsys):
    assert run(cfg, tmp_path, start=date(2025, 11, 26), end=date(2025, 11, 24))[0] == \
        exitcodes.USAGE
    assert "--to 2025-11-24 is before --from 2025-11-26" in capsys.readouterr().err
    assert run(cfg, tmp_path, job="nightly")[0] == exitcodes.USAGE
    assert ("nightly is a daily job at a fixed UTC time (`at`): a backfill runs a job once per "
            "exchange session") in capsys.readouterr().err
    assert run(cfg, tmp_path, job="nope")[0] == exitcodes.USAGE
    assert "no job named 'nope'" in capsys.readouterr().err


def test_a_paused_job_is_run_and_the_backfill_says_a_pause_does_not_hold_it(cfg, tmp_path,
                                                                            capsys):
    from market_timers.ledger.pauses import write_failure_pause

    write_failure_pause(cfg.state_dir, "closing-orders", {
        "by": "pause_on_failure", "since": "2025-11-21T21:00:00Z", "job": "closing-orders",
        "session": "2025-11-21", "note": "closing-orders failed"})
    code, fake = run(cfg, tmp_path, end=date(2025, 11, 24))
    assert code == 0 and fake.runs() == [("closing-orders", "2025-11-24")]
    out = capsys.readouterr().out
    assert ("note: closing-orders is paused (lock group closing-orders, by pause_on_failure: "
            "closing-orders failed); a pause does not hold an operator's run") in out
    assert "market-timers resume --group closing-orders" in out


def test_the_cli_keeps_backfill_options_apart_from_session_ones(cfg, write_config, tmp_path,
                                                                capsys):
    path = str(tmp_path / "market-timers.toml")
    code = cli.main(["--config", path, "run", "closing-orders", "--session", "2025-11-26",
                     "--keep-going"])
    assert code == exitcodes.USAGE
    assert "--keep-going: only with --from" in capsys.readouterr().err
    code = cli.main(["--config", path, "run", "closing-orders", "--from", "2025-11-24",
                     "--force"])
    assert code == exitcodes.USAGE
    assert "--force: only with --session" in capsys.readouterr().err
    code = cli.main(["--config", path, "--now", "2025-12-02T12:00:00Z", "run", "closing-orders",
                     "--from", "2025-11-24", "--to", "2025-11-26", "--dry-run", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["outcome"] for r in report["runs"]] == ["would-run"] * 3


class UnitThatNeverRecords(FakeSystemd):
    """systemd ends the unit before the runner wrote anything (e.g. its credential missing)."""

    def show(self, units, props):
        [unit] = units
        self.running = None
        return {unit: {"ActiveState": "failed", "InvocationID": "inv", "Result": "resources"}}


class UnitThatNeverEnds(FakeSystemd):
    def show(self, units, props):
        return {units[0]: {"ActiveState": "active", "InvocationID": "inv"}}


def test_a_unit_that_ended_without_a_record_is_a_failure(cfg, tmp_path, capsys):
    code, fake = run(cfg, tmp_path, fake=UnitThatNeverRecords(cfg))
    assert code == exitcodes.FAILURE and len(fake.started) == 1
    assert "the unit ended (resources) before the runner recorded a start" in \
        capsys.readouterr().out


def test_the_wait_is_bounded_by_the_jobs_timeout_and_stops_the_backfill(cfg, tmp_path, capsys):
    ticks = iter(range(0, 10**6, 60))
    fake = UnitThatNeverEnds(cfg)
    code = backfill.command(cfg, "closing-orders", date(2025, 11, 24), date(2025, 11, 26),
                            now=NOW, systemctl=fake, unit_dir=tmp_path / "run-units",
                            sleep=lambda s: None, clock=lambda: next(ticks), keep_going=True)
    assert code == exitcodes.FAILURE and len(fake.started) == 1  # never a second start beside it
    out = capsys.readouterr().out
    assert "not ended after 1922 s (its timeout, retries and a margin): no longer waiting" in out
    assert "2025-11-25  closing-orders: not run (the backfill stopped: a run did not end)" in out
