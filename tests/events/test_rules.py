"""The [events] rules one by one, through the real spool, processor, router and fake channels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from market_timers import cli
from market_timers.alerts import delivery
from market_timers.alerts.commands import ack
from market_timers.alerts.digest import build
from market_timers.events import spool
from market_timers.events.plan_lookup import PlanLookup
from market_timers.events.process import drain, incidents_list
from market_timers.events.report import digest_lines
from market_timers.events.store import read_open, read_session

from .conftest import EXAMPLE

T0 = datetime(2025, 11, 13, 15, 0, tzinfo=UTC)
SESSION = "2025-11-13"


class Feed:
    """Spool events at instants and run the processor there, as market-events.service would."""

    def __init__(self, cfg, ctx, dirs, schedule=None):
        self.cfg, self.ctx, self.dirs = cfg, ctx, dirs
        self.schedule = schedule or PlanLookup()

    def send(self, seconds: float, kind: str, process: bool = True, **fields):
        at = T0 + timedelta(seconds=seconds)
        spool.write(spool.make_event(kind, at=at.timestamp(), **fields), self.dirs)
        if process:
            return self.run(seconds)

    def run(self, seconds: float):
        self.ctx.now = lambda: T0 + timedelta(seconds=seconds)
        return drain(self.ctx, self.cfg.events, self.cfg.state_dir, self.dirs,
                     T0 + timedelta(seconds=seconds), self.schedule)


def heads(api, service=None):
    return [m["text"].splitlines()[0] for m in api.received(service)]


@pytest.fixture
def feed(example, ctx_for, dirs):
    def make(events="example", schedule=None, **alerts):
        cfg = example(events=events, **alerts)
        return Feed(cfg, ctx_for(cfg), dirs, schedule)

    return make


def test_an_outage_alerts_when_its_threshold_passes_not_when_it_ends(feed, api):
    f = feed()
    f.send(0, "heartbeat_lost", key="real")
    f.send(1, "disconnected", key="real")
    f.run(60)  # exactly interrupt_after: not yet
    assert api.received() == []
    f.run(61)
    assert heads(api) == ["[WARNING] connection real: not resolved after 60 s "
                          "(heartbeat_lost, disconnected)"]
    [inc] = read_open(f.cfg.state_dir)
    assert inc["alerted"] and inc["count"] == 2
    f.send(75, "reconnected", key="real")
    assert heads(api)[1] == "[RESOLVED] connection real resolved after 75 s"
    assert read_open(f.cfg.state_dir) == []
    [inc] = read_session(f.cfg.state_dir, SESSION)["incidents"]
    assert inc["duration_sec"] == 75 and inc["recovery_id"]


def test_a_processor_that_runs_late_alerts_at_the_threshold_instant_in_order(feed, api):
    f = feed()
    f.send(0, "heartbeat_lost", key="real", process=False)
    f.send(90, "reconnected", key="real", process=False)
    f.run(300)
    assert heads(api) == ["[WARNING] connection real: not resolved after 60 s (heartbeat_lost)",
                          "[RESOLVED] connection real resolved after 90 s"]


def test_a_short_outage_is_one_digest_line(feed, api):
    f = feed()
    for t, kind in ((0, "heartbeat_lost"), (0, "disconnected"), (42, "reconnected")):
        f.send(t, kind, key="real")
    f.run(3600)
    assert api.received() == []
    text = build(f.ctx, SESSION, digest_lines)
    assert "connection real: resolved after 42 s (within interrupt_after 60 s" in text
    assert "not interrupting (digest only) (3 events: heartbeat_lost, disconnected, reconnected)" \
        in text


def test_separate_keys_are_separate_incidents(feed, api):
    f = feed()
    f.send(0, "disconnected", key="paper")
    f.send(5, "disconnected", key="real")
    f.send(30, "reconnected", key="paper")
    f.run(100)
    assert heads(api) == ["[WARNING] connection real: not resolved after 60 s (disconnected)"]
    assert [i["key"] for i in read_open(f.cfg.state_dir)] == ["real"]


def test_a_close_with_nothing_open_is_a_digest_line(feed, api):
    f = feed()
    f.send(0, "reconnected", key="real")
    assert api.received() == []
    assert "reconnected real: no open connection incident" in build(f.ctx, SESSION, digest_lines)


def test_a_critical_incident_repeats_until_ack_and_the_recovery_names_it(feed, api):
    rules = {"incident": [{"name": "recon", "open": ["reconciliation_mismatch"],
                           "close": ["reconciled"], "severity": "critical"}]}
    f = feed(events=rules)
    f.send(0, "reconciliation_mismatch", key="AAPL", text="position 100 vs statement 90")
    [first] = heads(api, "telegram")
    assert first == "[CRITICAL] recon AAPL: reconciliation_mismatch"
    alert_id = read_open(f.cfg.state_dir)[0]["alert_id"]
    f.ctx.now = lambda: T0 + timedelta(minutes=16)
    delivery.flush(f.ctx)
    assert heads(api, "telegram")[1] == first + " (repeat 1)"
    assert ack(f.ctx, alert_id) == 0
    f.ctx.now = lambda: T0 + timedelta(minutes=40)
    delivery.flush(f.ctx)
    assert len(api.received("telegram")) == 2
    f.send(45 * 60, "reconciled", key="AAPL")
    assert heads(api, "telegram")[2] == "[RESOLVED] recon AAPL resolved after 2700 s"
    assert f"alert {alert_id} is resolved" in api.received("telegram")[2]["text"]


def test_the_dedup_window_folds_a_second_outage_of_the_same_key(feed, api):
    f = feed()
    for start in (0, 600):
        f.send(start, "disconnected", key="real")
        f.send(start + 90, "reconnected", key="real")
    assert heads(api) == ["[WARNING] connection real: not resolved after 60 s (disconnected)",
                          "[RESOLVED] connection real resolved after 90 s"]
    second = read_session(f.cfg.state_dir, SESSION)["incidents"][1]
    assert second["handling"] == "deduplicated" and not second["alerted"]


def test_twenty_slippage_warnings_are_one_alert_with_count_worst_and_times(feed, api):
    f = feed()
    values = [3.1 + (i % 7) * 0.4 for i in range(25)]
    for i, v in enumerate(values):
        f.send(60 * i, "slippage_high", key=f"O{i}", value=v)
    assert len(api.received()) == 1
    msg = api.received("slack")[0]["text"]
    worst20 = max(values[:20])
    assert msg.startswith(f"[WARNING] slippage_high: 20 events in session {SESSION}")
    assert f"worst {worst20:g} at " in msg and "first 15:00:00Z, last 15:19:00Z" in msg
    text = build(f.ctx, SESSION, digest_lines)
    assert "slippage_high: 25 events (threshold 20)" in text


def test_scheduled_is_not_news_by_time_or_by_sender(feed, api):
    planned = T0 + timedelta(minutes=1)
    f = feed(schedule=PlanLookup([("disconnect", SESSION, planned)]))
    f.send(65, "disconnected", key="real")  # 5 s after the disconnect job's instant
    f.send(4000, "disconnected", key="real", job="disconnect")  # sent by the job itself
    f.send(4001, "reconnected", key="real")
    assert api.received() == []
    assert build(f.ctx, SESSION, digest_lines).count("disconnected real: expected after disconnect") == 2
    f.send(5000, "disconnected", key="real")  # neither: a cut
    f.run(5100)
    assert len(api.received()) == 1


def test_per_kind_severity_wins_then_the_events_own_then_the_default(feed, api):
    f = feed()
    f.send(0, "rejected", key="R1", severity="info")          # config: critical
    f.send(1, "cancelled", key="R2", severity="critical")     # config: digest
    f.send(2, "margin_call", key="acct", severity="critical")  # not in config: its own
    f.send(3, "odd_thing", key="x")                           # default: warning
    assert heads(api, "telegram") == ["[CRITICAL] rejected R1", "[CRITICAL] margin_call acct"]
    assert heads(api, "slack") == ["[WARNING] odd_thing x"]
    assert "cancelled R2" in build(f.ctx, SESSION, digest_lines)


def test_off_is_recorded_and_never_sent(feed, api):
    f = feed(events={"default_severity": "off"})
    f.send(0, "chatter")
    assert api.received() == []


def test_a_malformed_spool_file_is_set_aside_and_raises_a_warning(feed, api, dirs):
    f = feed()
    bad = f"{dirs[0]}/0000000000000000001-1-aa.json"
    with open(bad, "w") as fh:
        fh.write('{"kind": "Bad kind"}')
    f.run(0)
    assert heads(api) == ["[WARNING] 1 malformed event file(s) set aside"]
    assert list(Path(dirs[0]).iterdir()) == []
    assert [p.name for p in Path(dirs[0] + ".bad").iterdir()] == ["0000000000000000001-1-aa.json"]


def test_an_event_processed_but_not_yet_removed_is_not_routed_twice(feed, api, dirs):
    f = feed()
    f.send(0, "rejected", key="R1", process=False)
    [path] = Path(dirs[0]).iterdir()
    copy = path.read_bytes()
    f.run(1)
    path.write_bytes(copy)  # as if the processor died before its unlink
    f.run(2)
    assert len(api.received()) == 1 and not path.exists()


def test_incidents_lists_the_open_ones(feed, capsys):
    f = feed()
    f.send(0, "disconnected", key="real")
    assert incidents_list(f.cfg, True, now=T0 + timedelta(seconds=10)) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["rule"], row["key"], row["open_sec"], row["alerted"]) == (
        "connection", "real", 10.0, False)
    incidents_list(f.cfg, False, now=T0 + timedelta(seconds=10))
    out = capsys.readouterr().out
    assert "connection real  opened 2025-11-13T15:00:00Z (10 s ago)" in out
    assert "alerts after 15:01:00Z if still open" in out


def test_the_cli_spools_in_the_configs_spool_dir_even_when_the_rest_of_it_is_broken(
        tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f"horizon = 'x'\nspool_dir = '{tmp_path / 'spool'}'\n[[job]]\nname = 1\n")
    target = tmp_path / "spool" / "events"
    target.mkdir(parents=True)
    monkeypatch.setenv(spool.DIR_ENV, str(tmp_path / "elsewhere"))
    rc = cli.main(["--config", str(cfg), "--now", "2025-11-13T15:00:00Z", "event", "rejected",
                   "--key", "R1", "--text", "no funds", "--value", "2"])
    assert rc == 0 and capsys.readouterr().err == ""  # only spool_dir and runtime_dir are read
    [path] = target.iterdir()
    event = json.loads(path.read_text())
    assert event["at"] == "2025-11-13T15:00:00.000Z" and event["value"] == 2.0
    assert cli.main(["--config", str(cfg), "event", "Bad"]) == 2


@pytest.mark.parametrize("text, named", [
    ("spool_dir = 'relative/dir'\n", "spool_dir = 'relative/dir'"),
    ("runtime_dir = 7\n", "runtime_dir = 7"),
    ("horizon = \n", "not valid TOML"),
])
def test_a_bad_spool_dir_is_named_and_the_event_still_spooled(tmp_path, monkeypatch, capsys,
                                                               text, named):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    target = tmp_path / "events"
    target.mkdir()
    monkeypatch.setenv(spool.DIR_ENV, str(target))
    monkeypatch.setenv(spool.FALLBACK_ENV, str(tmp_path / "run"))
    assert cli.main(["--config", str(cfg), "event", "rejected", "--key", "R1"]) == 0
    err = capsys.readouterr().err
    assert str(cfg) in err and named in err and "default spool directory" in err
    assert len(list(target.iterdir())) == 1


def test_the_event_command_does_not_load_the_config_or_the_router(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"spool_dir = '{tmp_path}'\n" + EXAMPLE.read_text())
    (tmp_path / "events").mkdir()
    code = ("import sys\nfrom market_timers import cli\n"
            f"rc = cli.main(['--config', {str(cfg)!r}, 'event', 'rejected', '--key', 'R1'])\n"
            "heavy = [m for m in ('market_timers.config.loader', 'market_timers.alerts.api', "
            "'market_timers.events.engine', 'market_timers.events.process') if m in sys.modules]\n"
            "print(rc, heavy)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "0 []"
    assert len(list((tmp_path / "events").iterdir())) == 1


@pytest.mark.parametrize("events, key, message", [
    ({"nope": 1}, "events.nope", "unknown key"),
    ({"default_severity": "loud"}, "events.default_severity", "must be one of"),
    ({"severity": {"Bad": "critical"}}, "events.severity.Bad", "event kind"),
    ({"severity": {"x": "urgent"}}, "events.severity.x", "must be one of"),
    ({"expected": [{"kind": "disconnected", "after_job": "nojob"}]},
     "events.expected[0].after_job", "no [[job]] has this name"),
    ({"expected": [{"kind": "d", "after_job": "disconnect", "within": "10"}]},
     "events.expected[0].within", "cannot parse"),
    ({"incident": [{"name": "c", "open": ["a"], "close": ["a"]}]},
     "events.incident[0].close", "both open and close"),
    ({"incident": [{"name": "c", "open": ["a"], "close": ["b"]},
                   {"name": "d", "open": ["a"], "close": ["e"]}]},
     "events.incident[1]", "already handled by events.incident[0]"),
    ({"incident": [{"name": "c", "open": ["a"], "close": ["b"], "interrupt_after": "-5s"}]},
     "events.incident[0].interrupt_after", "no sign"),
    ({"incident": [{"name": "c", "open": [], "close": ["b"]}]},
     "events.incident[0].open", "non-empty array"),
    ({"count": [{"kind": "s", "threshold": 0}]}, "events.count[0].threshold", ">= 1"),
    ({"count": [{"kind": "s", "threshold": 2, "worst": "avg"}]}, "events.count[0].worst",
     "max, min"),
    ({"incident": [{"name": "c", "open": ["a"], "close": ["b"]}], "severity": {"a": "info"}},
     "events.severity.a", "handled by events.incident[0]"),
])
def test_bad_rules_name_the_file_the_key_and_the_value(example, events, key, message):
    from market_timers.schema.problems import ConfigError

    with pytest.raises(ConfigError) as e:
        example(events=events)
    lines = e.value.problems.lines()
    assert any(f": {key}: " in line and message in line for line in lines), lines
    assert all(line.startswith(str(EXAMPLE)) for line in lines)


def test_a_run_record_of_the_job_makes_its_event_expected(feed, api):
    from market_timers.ledger import runrecord

    f = feed(schedule=None)
    f.schedule = None  # the processor reads plan.json and the run records itself
    runrecord.update(f.cfg.state_dir, "disconnect", SESSION, started_utc="2025-11-13T15:00:30Z",
                     result="success")
    spool.write(spool.make_event("disconnected", key="real",
                                 at=(T0 + timedelta(seconds=60)).timestamp()), f.dirs)
    drain(f.ctx, f.cfg.events, f.cfg.state_dir, f.dirs, T0 + timedelta(seconds=120))
    assert api.received() == []
    assert "disconnected real: expected after disconnect" in build(f.ctx, SESSION, digest_lines)


class FakeTime:
    """A clock that moves only when the processor sleeps."""

    def __init__(self):
        self.t = T0
        self.sleeps: list[float] = []

    def now(self):
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return (self.t - T0).total_seconds()


def test_the_service_waits_for_a_threshold_under_a_minute_then_lingers_and_exits(
        feed, api, creds, monkeypatch):
    from market_timers.channels.credentials import OVERRIDE
    from market_timers.events.process import LINGER, process

    monkeypatch.setenv(OVERRIDE, str(creds))
    f = feed()
    clock = FakeTime()
    spool.write(spool.make_event("disconnected", key="real", at=T0.timestamp()), f.dirs)
    assert process(f.cfg, clock=clock.now, sleep=clock.sleep, monotonic=clock.monotonic) == 0
    [alert] = api.received()
    assert alert["text"].startswith("[WARNING] connection real: not resolved after 60 s")
    waited = clock.monotonic()
    assert 60 < waited < 60 + LINGER + 2  # it stayed for the threshold, then a short linger
    assert max(clock.sleeps) <= 1.0  # polling the spool meanwhile


def test_the_service_does_not_wait_for_a_threshold_minutes_away(feed, api):
    from market_timers.events.process import LINGER, process

    f = feed(events={"incident": [{"name": "c", "open": ["down"], "close": ["up"],
                                   "interrupt_after": "10min"}]})
    clock = FakeTime()
    spool.write(spool.make_event("down", at=T0.timestamp()), f.dirs)
    process(f.cfg, clock=clock.now, sleep=clock.sleep, monotonic=clock.monotonic)
    assert api.received() == [] and clock.monotonic() <= LINGER + 1
    assert read_open(f.cfg.state_dir)[0]["rule"] == "c"  # market-events.timer will tick it


def test_an_alert_routed_in_a_late_pass_still_goes_to_its_first_channel(feed, api):
    # Regression (e2e replay): delivered at the pass's clock, hours after its threshold, a
    # warning counted as "10 minutes on slack" already and went to telegram instead.
    f = feed()
    f.send(0, "disconnected", key="real", process=False)
    f.run(7200)
    assert heads(api, "slack") == ["[WARNING] connection real: not resolved after 60 s "
                                   "(disconnected)"]
    assert api.received("telegram") == []


def _xnys_session(at: datetime) -> str:
    """exchange_calendars' own answer, the independent one."""
    import exchange_calendars
    import pandas as pd

    cal = exchange_calendars.get_calendar("XNYS")
    return cal.minute_to_session(pd.Timestamp(at), direction="previous").date().isoformat()


@pytest.mark.parametrize("at, session", [
    (datetime(2025, 11, 13, 15, 0, tzinfo=UTC), "2025-11-13"),   # in session, before any fire
    (datetime(2025, 11, 13, 20, 59, tzinfo=UTC), "2025-11-13"),  # a minute before the close
    (datetime(2025, 11, 13, 23, 0, tzinfo=UTC), "2025-11-13"),   # after the close: that session
    (datetime(2025, 11, 14, 12, 0, tzinfo=UTC), "2025-11-14"),   # 07:00 New York: the day's
    (datetime(2025, 11, 15, 15, 0, tzinfo=UTC), "2025-11-14"),   # a Saturday: the previous one
    (datetime(2025, 11, 27, 15, 0, tzinfo=UTC), "2025-11-26"),   # Thanksgiving: the previous
])
def test_an_events_session_is_the_calendars_session_of_its_time(at, session):
    # Only close-relative jobs: the plan's latest fire before 10:00 New York is yesterday's.
    fires = [("eod", d.isoformat(), datetime(d.year, d.month, d.day, 21, 5, tzinfo=UTC))
             for d in (date(2025, 11, 12), date(2025, 11, 13), date(2025, 11, 14))]
    schedule = PlanLookup(fires, calendar="XNYS")
    assert schedule.session_of(at) == session
    if at.date() != date(2025, 11, 14) or at.hour > 14:  # in or after a session
        assert _xnys_session(at) == session


def test_an_in_session_event_lands_in_its_own_days_digest(feed):
    fires = [("eod", "2025-11-12", datetime(2025, 11, 12, 21, 5, tzinfo=UTC))]
    f = feed(schedule=PlanLookup(fires, calendar="XNYS"))
    f.send(0, "slippage", key="O1", severity="warning")  # 10:00 New York on 2025-11-13
    assert any("slippage O1" in json.dumps(e) for e in f.ctx.state.events(SESSION))
    assert f.ctx.state.events("2025-11-12") == []


def test_the_processor_takes_the_session_from_the_configs_calendar(example, dirs, monkeypatch):
    from market_timers.events import process as process_mod

    cfg = example(events="example")
    monkeypatch.setattr(process_mod, "spool_dirs", lambda config: dirs)
    evening = T0 + timedelta(hours=11)  # 21:00 New York, 02:00 UTC the next day
    spool.write(spool.make_event("slippage", key="O2", severity="warning",
                                 at=evening.timestamp()), dirs)
    assert process_mod.process(cfg, now=evening) == 0  # no plan: not the UTC date's guess
    assert any("slippage O2" in json.dumps(e) for e in read_events(cfg, SESSION))


def read_events(cfg, session):
    from market_timers.alerts.state import AlertState

    return AlertState(cfg.state_dir).events(session)


def test_a_pass_ends_when_the_config_changes_and_leaves_what_came_after_to_a_fresh_pass(
        feed, api, creds, monkeypatch, tmp_path):
    """A pass loads the config once and may poll for minutes: an event spooled after the config
    changed is routed by a fresh pass that reads the new rules (market-events.path starts it),
    never under the old ones (e2e: a gateway's heartbeat_lost was alerted as a plain event by
    a pass begun before its incident rule was synced)."""
    from market_timers.channels.credentials import OVERRIDE
    from market_timers.events.intake import pending
    from market_timers.events.process import process

    monkeypatch.setenv(OVERRIDE, str(creds))
    f = feed()
    source = tmp_path / "live.toml"
    source.write_text("# the live config\n")
    f.cfg.source = str(source)
    clock = FakeTime()
    spool.write(spool.make_event("disconnected", key="real", at=T0.timestamp()), f.dirs)

    def sleep(seconds: float) -> None:  # 5 s in, the config is edited and a new event spooled
        before = clock.monotonic()
        clock.sleep(seconds)
        if before < 5 <= clock.monotonic():
            stamp = source.stat().st_mtime_ns + 1_000_000_000
            os.utime(source, ns=(stamp, stamp))
            spool.write(spool.make_event("heartbeat_lost", key="new", at=clock.t.timestamp()),
                        f.dirs)

    assert process(f.cfg, clock=clock.now, sleep=sleep, monotonic=clock.monotonic) == 0
    assert clock.monotonic() < 10  # it did not stay for the 60 s threshold of `real`
    assert [p.name for p in pending(f.dirs)] != []  # heartbeat_lost: left for the fresh pass
    assert api.received() == []
