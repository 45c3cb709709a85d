"""`market-timers status`: the JSON shape and the readable table, over the Thanksgiving week."""

from __future__ import annotations

import json
from datetime import date

import pytest

from market_timers.ledger import runrecord
from market_timers.schedule import sync as sync_mod
from market_timers.watch import status

from .conftest import utc

JOB_KEYS = {"job", "calendar", "event", "fire_utc", "unit", "timer", "result", "exit_status",
            "duration_sec", "late_sec", "started_utc", "finished_utc", "attempts", "host",
            "refused_starts", "alerts", "fire_local", "timezone"}


@pytest.fixture
def week(make_config, fake_systemctl, tmp_path):
    config = make_config()
    fake_systemctl.now = utc("2025-11-21T22:00:00Z")
    sync_mod.sync(config, now=fake_systemctl.now, systemctl=fake_systemctl,
                  stamp_dir=tmp_path / "stamps")
    runrecord.update(config.state_dir, "signal", "2025-11-24", scheduled_utc="2025-11-24T20:45:00Z",
                     started_utc="2025-11-24T20:45:00Z", finished_utc="2025-11-24T20:45:04Z",
                     result="success", exit_code="exited", exit_status="0", duration_sec=4)
    return config


def status_json(config, systemctl, capsys, now, session=None):
    systemctl.now = now
    code = status.command(config, session, True, now, systemctl=systemctl)
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_status_json_has_sessions_with_each_jobs_timer_result_and_alerts(week, fake_systemctl,
                                                                         capsys):
    doc = status_json(week, fake_systemctl, capsys, utc("2025-11-26T12:00:00Z"))
    assert set(doc) == {"now", "plan_generated_utc", "sessions", "outbox", "calendar_warnings"}
    assert doc["now"] == "2025-11-26T12:00:00Z"
    labels = [s["session"] for s in doc["sessions"]]
    assert labels[0] == "2025-11-25" and "2025-11-27" not in labels and "2025-11-28" in labels
    by = {s["session"]: s["jobs"][0] for s in doc["sessions"]}
    assert set(by["2025-11-25"]) == JOB_KEYS
    assert (by["2025-11-25"]["timer"], by["2025-11-25"]["result"]) == ("elapsed", "missed")
    assert (by["2025-11-26"]["timer"], by["2025-11-26"]["result"]) == ("waiting", "scheduled")
    assert by["2025-11-28"]["fire_utc"] == "2025-11-28T17:45:00Z"


def test_status_for_one_session_shows_the_run_result_and_duration(week, fake_systemctl, capsys):
    doc = status_json(week, fake_systemctl, capsys, utc("2025-11-26T12:00:00Z"),
                      session=date(2025, 11, 24))
    [only] = doc["sessions"]
    job = only["jobs"][0]
    assert only["session"] == "2025-11-24"
    assert (job["result"], job["duration_sec"], job["exit_status"]) == ("success", 4, "0")


def test_status_marks_a_deleted_timer_missing(week, fake_systemctl, capsys):
    (week.unit_dir / "market-signal@2025-11-28-174500.timer").unlink()
    doc = status_json(week, fake_systemctl, capsys, utc("2025-11-26T12:00:00Z"),
                      session=date(2025, 11, 28))
    assert doc["sessions"][0]["jobs"][0]["timer"] == "missing"


def test_status_lists_the_deadmans_missed_alert_for_that_job(week, fake_systemctl, capsys):
    pytest.importorskip("market_timers.alerts.api")
    from market_timers.watch import deadman

    now = utc("2025-11-25T22:00:00Z")
    fake_systemctl.now = now
    deadman.run_pass(week, now, systemctl=fake_systemctl, env={})
    doc = status_json(week, fake_systemctl, capsys, now, session=date(2025, 11, 25))
    alerts = doc["sessions"][0]["jobs"][0]["alerts"]
    assert [a["kind"] for a in alerts] == ["missed"]


def test_status_table_is_readable(week, fake_systemctl, capsys):
    fake_systemctl.now = utc("2025-11-26T12:00:00Z")
    assert status.command(week, None, False, fake_systemctl.now, systemctl=fake_systemctl) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["SESSION", "JOB", "EXCHANGE", "UTC", "TIMER", "RESULT", "EXIT",
                              "DURATION", "ALERTS"]
    # today's session and the next: Wednesday, then Friday (Thursday is Thanksgiving)
    assert out[1].split()[:7] == ["Wed", "2025-11-26", "signal", "15:45", "EST", "20:45Z",
                                  "waiting"]
    assert out[2].split()[:7] == ["Fri", "2025-11-28", "signal", "12:45", "EST", "17:45Z",
                                  "waiting"]


def test_status_without_a_plan_says_sync_has_not_run(make_config, fake_systemctl, capsys):
    config = make_config()
    assert status.command(config, None, False, utc("2025-11-26T12:00:00Z"),
                          systemctl=fake_systemctl) == 1
    assert "sync has not run" in capsys.readouterr().out


def test_status_shows_a_forced_second_attempt_and_a_refused_second_start(week, fake_systemctl,
                                                                         capsys):
    from market_timers import ledger
    from market_timers.ledger.local import LocalLedger

    book = LocalLedger(str(week.state_dir))
    key = ledger.Key("signal", "2025-11-24")  # attempt 1 (success) is the fixture's
    book.refuse(key, {"refused": "already-ran", "started_utc": "2025-11-24T20:50:00Z",
                      "invocation": "i2"})
    assert book.claim(key, "forced", {"host": "ny4-b", "by": "alice", "invocation": "i3",
                                      "started_utc": "2025-11-24T21:30:00Z"}).attempt == 2
    book.finish(key, "i3", {"result": "success", "exit_status": "0"})
    doc = status_json(week, fake_systemctl, capsys, utc("2025-11-25T12:00:00Z"), date(2025, 11, 24))
    [row] = doc["sessions"][0]["jobs"]
    assert (row["result"], row["attempts"], row["host"], row["refused_starts"]) == (
        "success", 2, "ny4-b", ["already-ran"])
    status.command(week, date(2025, 11, 24), False, utc("2025-11-25T12:00:00Z"),
                   systemctl=fake_systemctl)
    assert "success (attempt 2), then refused: already-ran" in capsys.readouterr().out


def test_status_names_a_refused_start_of_a_session_that_never_ran(week, fake_systemctl, capsys):
    runrecord.update(week.state_dir, "signal", "2025-11-25", refused="stale-start",
                     started_utc="2025-11-25T20:50:00Z")
    runrecord.update(week.state_dir, "signal", "2025-11-25", result="exit-code",
                     exit_status="170")
    doc = status_json(week, fake_systemctl, capsys, utc("2025-11-26T12:00:00Z"), date(2025, 11, 25))
    assert doc["sessions"][0]["jobs"][0]["result"] == "stale-start"


@pytest.mark.parametrize(("result", "exit_status", "shown"), [
    ("exit-code", "3", "failed (exit 3)"),
    ("signal", "KILL", "killed (signal KILL)"),
    ("core-dump", "SEGV", "killed (signal SEGV, core dumped)"),
    ("oom-kill", "KILL", "killed (out of memory)"),
    ("watchdog", "ABRT", "hung (killed by the watchdog)"),
    ("timeout", "TERM", "timed out (past its time limit)"),
])
def test_status_table_says_how_a_failed_run_ended_in_words(week, fake_systemctl, capsys, result,
                                                           exit_status, shown):
    runrecord.update(week.state_dir, "signal", "2025-11-25", scheduled_utc="2025-11-25T20:45:00Z",
                     started_utc="2025-11-25T20:45:00Z", finished_utc="2025-11-25T20:45:04Z",
                     result=result, exit_status=exit_status, duration_sec=4)
    status.command(week, date(2025, 11, 25), False, utc("2025-11-26T12:00:00Z"),
                   systemctl=fake_systemctl)
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert row[head.index("RESULT"):].startswith(shown + " ")
    doc = status_json(week, fake_systemctl, capsys, utc("2025-11-26T12:00:00Z"), date(2025, 11, 25))
    assert doc["sessions"][0]["jobs"][0]["result"] == result  # the JSON keeps systemd's Result
