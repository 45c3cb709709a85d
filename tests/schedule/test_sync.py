"""sync against a recording systemctl: which files change and which systemd calls are made.

The real systemd behaviour (timers firing, no re-fire) is covered by the e2e tests; these check the
rules that avoid systemd 252's traps: no restart, no in-place instant change, no past timer, no
reload for new files, one reload at most.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_timers.config import loader as config
from market_timers.schedule import sync

SIGNAL = """
calendar = "XNYS"
horizon = 3
retention_days = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""
WED = datetime(2025, 11, 26, 12, 0, tzinfo=UTC)


class RecordingSystemctl:
    def __init__(self):
        self.calls: list[tuple] = []
        self.active: set[str] = set()
        self.reloads = 0

    def show(self, units, props):
        return {u: {"ActiveState": "active" if u in self.active else "inactive"} for u in units}

    def start(self, units):
        if units:
            self.calls.append(("start", tuple(units)))
            self.active |= set(units)

    def stop(self, units):
        if units:
            self.calls.append(("stop", tuple(units)))
            self.active -= set(units)

    def reset_failed(self, units):
        pass

    def daemon_reload(self):
        self.reloads += 1
        self.calls.append(("daemon-reload",))


@pytest.fixture
def setup(write_config, tmp_path):
    def make(text=SIGNAL):
        path = write_config(text)
        return path, config.load(path)

    return make


def names(unit_dir: Path, suffix=".timer") -> list[str]:
    return sorted(p.name for p in unit_dir.glob(f"market-*{suffix}"))


def test_first_sync_writes_enables_and_starts_without_reload(setup, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    result = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    want = ["market-signal@2025-11-26-204500.timer", "market-signal@2025-11-28-174500.timer",
            "market-signal@2025-12-01-204500.timer"]
    assert names(cfg.unit_dir) == want
    assert sorted(p.name for p in (cfg.unit_dir / "timers.target.wants").iterdir()) == want
    assert sc.calls == [("start", tuple(want))] and sc.reloads == 0
    assert not result.reloaded
    plan = json.loads((cfg.state_dir / "plan.json").read_text())
    assert [f["fire_utc"] for f in plan["fires"]] == [
        "2025-11-26T20:45:00Z", "2025-11-28T17:45:00Z", "2025-12-01T20:45:00Z"]
    assert plan["fires"][0]["grace_sec"] == 120


def test_second_sync_changes_nothing(setup, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in cfg.unit_dir.iterdir()}
    sc.calls.clear()
    result = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert sc.calls == [] and not result.changed_anything
    assert result.lines() == ["nothing to do"]
    assert {p.name: p.stat().st_mtime_ns for p in cfg.unit_dir.iterdir()} == before


def test_new_closure_stops_and_deletes_that_timer_without_starting_it(setup, write_config,
                                                                        tmp_path):
    path, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    sc.calls.clear()
    cfg = config.load(write_config(SIGNAL + '[overrides.XNYS]\nclosed = ["2025-11-28"]\n'))
    result = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    gone = "market-signal@2025-11-28-174500.timer"
    assert result.removed == [gone]
    assert ("stop", (gone,)) in sc.calls
    assert all(gone not in c[1] for c in sc.calls if c[0] == "start")
    assert gone not in names(cfg.unit_dir) and sc.reloads == 0
    assert not (cfg.unit_dir / gone.replace(".timer", ".service")).exists()
    [change] = result.changes
    assert (change.job, change.session, change.old_utc, change.new_utc) == (
        "signal", "2025-11-28", "2025-11-28T17:45:00Z", None)
    assert change.describe() == ("XNYS 2025-11-28: signal no longer planned "
                                 "(was 2025-11-28T17:45:00Z)")
    # the horizon moves on by one session: the next one is added and started
    assert ("start", ("market-signal@2025-12-02-204500.timer",)) in sc.calls


def test_moved_close_is_a_new_unit_not_an_edited_one(setup, write_config, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    old = cfg.unit_dir / "market-signal@2025-12-01-204500.timer"
    old_text = old.read_text()
    cfg = config.load(write_config(SIGNAL + '[overrides.XNYS]\nearly_close = '
                                   '{ "2025-12-01" = "13:00" }\n'))
    result = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert not old.exists()
    new = cfg.unit_dir / "market-signal@2025-12-01-174500.timer"
    assert "OnCalendar=2025-12-01 17:44:58 UTC" in new.read_text()  # the default 2s lead
    assert "OnCalendar=2025-12-01 20:44:58 UTC" in old_text
    [change] = result.changes
    assert (change.old_utc, change.new_utc) == ("2025-12-01T20:45:00Z", "2025-12-01T17:45:00Z")
    assert sc.reloads == 0


def test_changed_command_rewrites_services_with_one_reload(setup, write_config, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    sc.calls.clear()
    cfg = config.load(write_config(SIGNAL.replace("/usr/bin/true", "/usr/bin/false")))
    result = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert len(result.rewritten) == 3 and sc.reloads == 1
    assert not any(c[0] in ("start", "stop") for c in sc.calls)


def test_fire_already_past_is_never_written(setup, tmp_path):
    _, cfg = setup()
    now = datetime(2025, 11, 26, 20, 44, 59, tzinfo=UTC)  # 1 s before Wednesday's fire
    sync.sync(cfg, now=now, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert "market-signal@2025-11-26-204500.timer" not in names(cfg.unit_dir)


def test_elapsed_units_are_kept_for_retention_then_deleted_with_stamp(setup, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=stamps)
    elapsed = "market-signal@2025-11-26-204500.timer"
    (stamps / f"stamp-{elapsed}").touch()
    sc.calls.clear()
    thu = datetime(2025, 11, 27, 12, 0, tzinfo=UTC)
    sync.sync(cfg, now=thu, systemctl=sc, stamp_dir=stamps)
    assert elapsed in names(cfg.unit_dir)  # within retention (2 days): kept, not stopped
    assert not any(c[0] == "stop" for c in sc.calls)
    later = datetime(2025, 11, 29, 21, 0, tzinfo=UTC)
    result = sync.sync(cfg, now=later, systemctl=sc, stamp_dir=stamps)
    assert elapsed in result.expired and elapsed not in names(cfg.unit_dir)
    assert not (stamps / f"stamp-{elapsed}").exists()
    assert not (cfg.unit_dir / "timers.target.wants" / elapsed).exists()


def test_dry_run_writes_nothing_and_says_what_it_would_do(setup, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    result = sync.sync(cfg, now=WED, systemctl=sc, dry_run=True, stamp_dir=tmp_path)
    assert not cfg.unit_dir.exists()
    assert sc.calls == []
    assert "would write market-signal@2025-11-26-204500.timer" in result.lines(dry_run=True)


def test_files_not_generated_by_us_are_left_alone(setup, tmp_path):
    _, cfg = setup()
    cfg.unit_dir.mkdir(parents=True)
    mine = cfg.unit_dir / "market-signal@2025-11-20-204500.timer"
    mine.write_text("[Timer]\nOnCalendar=2025-11-20 20:45:00 UTC\n")
    sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert mine.exists()


def test_stopped_planned_timer_is_started_again(setup, tmp_path):
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    sc.active.discard("market-signal@2025-11-28-174500.timer")  # stopped by hand
    sc.calls.clear()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert sc.calls == [("start", ("market-signal@2025-11-28-174500.timer",))]


def test_disabled_planned_timer_is_enabled_again(setup, tmp_path):
    """`apt remove` disables the session timers; the next sync enables and starts them again."""
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    link = cfg.unit_dir / "timers.target.wants" / "market-signal@2025-11-28-174500.timer"
    link.unlink()
    sc.active.discard(link.name)
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert link.is_symlink() and link.name in sc.active


def test_sync_just_before_a_fire_keeps_its_timer(setup, tmp_path):
    """A refresh 1 s before an installed timer fires must not cancel that run."""
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    sc.calls.clear()
    just_before = datetime(2025, 11, 26, 20, 44, 59, tzinfo=UTC)
    result = sync.sync(cfg, now=just_before, systemctl=sc, stamp_dir=tmp_path)
    assert "market-signal@2025-11-26-204500.timer" in names(cfg.unit_dir)
    assert result.removed == [] and result.changes == [] and sc.calls == []


# The run ledger (issue 10): sync never schedules a (job, session) that has already started ------

CLOSING = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "closing-orders"
event = "close"
offset = "{offset}"
command = ["/usr/bin/true"]
"""


def ran(cfg, job: str, session: str, at: str = "2025-11-26T20:50:00.031Z") -> None:
    """What the runner leaves in the ledger when the timer fired and the job started."""
    from market_timers.ledger import Key
    from market_timers.ledger.local import LocalLedger

    LocalLedger(str(cfg.state_dir)).claim(Key(job, session), "timer", {
        "host": "ny4-a", "pid": 4242, "started_utc": at})


def test_offset_changed_after_the_session_ran_does_not_schedule_it_again(write_config, tmp_path):
    """The live bug: closing-orders at close -10min ran at 20:50; at 20:52 the offset becomes
    -5min; sync must not install ...-205500.timer (the orders would be sent twice)."""
    cfg = config.load(write_config(CLOSING.format(offset="-10min")))
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert "market-closing-orders@2025-11-26-205000.timer" in names(cfg.unit_dir)
    ran(cfg, "closing-orders", "2025-11-26")
    sc.calls.clear()

    cfg = config.load(write_config(CLOSING.format(offset="-5min")))
    result = sync.sync(cfg, now=datetime(2025, 11, 26, 20, 52, tzinfo=UTC), systemctl=sc,
                       stamp_dir=tmp_path)
    twice = "market-closing-orders@2025-11-26-205500.timer"
    assert twice not in names(cfg.unit_dir)
    assert all(twice not in c[1] for c in sc.calls if c[0] == "start")
    # the elapsed timer that ran stays; the next session moves as asked
    assert "market-closing-orders@2025-11-26-205000.timer" in names(cfg.unit_dir)
    assert "market-closing-orders@2025-11-28-175500.timer" in names(cfg.unit_dir)
    lines = result.lines()
    assert (f"not install {twice}: closing-orders already ran for session 2025-11-26 "
            "(at 2025-11-26T20:50:00.031Z on host ny4-a (pid 4242, attempt 1, timer))") in lines
    assert ("change: XNYS 2025-11-26: closing-orders moved from 2025-11-26T20:50:00Z to "
            "2025-11-26T20:55:00Z; it already ran: not installed, not run again") in lines
    plan = json.loads((cfg.state_dir / "plan.json").read_text())
    [today] = [f for f in plan["fires"] if f["session"] == "2025-11-26"]
    assert today["fire_utc"] == "2025-11-26T20:50:00Z"  # what ran, for status and the deadman


def test_offset_changed_before_the_fire_moves_it_and_says_so(write_config, tmp_path):
    """The same change with no run yet (or a refused, stale one): the new timer is installed."""
    cfg = config.load(write_config(CLOSING.format(offset="-10min")))
    sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    cfg = config.load(write_config(CLOSING.format(offset="-5min")))
    result = sync.sync(cfg, now=datetime(2025, 11, 26, 20, 52, tzinfo=UTC),
                       systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert "market-closing-orders@2025-11-26-205500.timer" in names(cfg.unit_dir)
    assert ("change: XNYS 2025-11-26: closing-orders moved from 2025-11-26T20:50:00Z to "
            "2025-11-26T20:55:00Z") in result.lines()


def test_late_open_added_during_the_day_does_not_run_the_opening_job_twice(write_config,
                                                                             tmp_path):
    opening = CLOSING.format(offset="+5min").replace('"close"', '"open"').replace(
        "closing-orders", "opening-orders")
    cfg = config.load(write_config(opening))
    sc = RecordingSystemctl()
    sync.sync(cfg, now=datetime(2025, 11, 26, 9, 0, tzinfo=UTC), systemctl=sc, stamp_dir=tmp_path)
    assert "market-opening-orders@2025-11-26-143500.timer" in names(cfg.unit_dir)
    ran(cfg, "opening-orders", "2025-11-26", at="2025-11-26T14:35:00.020Z")
    cfg = config.load(write_config(opening + '[overrides.XNYS]\nlate_open = '
                                   '{ "2025-11-26" = "10:30" }\n'))
    result = sync.sync(cfg, now=datetime(2025, 11, 26, 15, 0, tzinfo=UTC), systemctl=sc,
                       stamp_dir=tmp_path)
    assert "market-opening-orders@2025-11-26-153500.timer" not in names(cfg.unit_dir)
    assert any(line.startswith("not install market-opening-orders@2025-11-26-153500.timer: "
                               "opening-orders already ran for session 2025-11-26")
               for line in result.lines())


def test_a_waiting_timer_of_a_session_run_early_by_hand_is_withdrawn(write_config, tmp_path):
    cfg = config.load(write_config(CLOSING.format(offset="-10min")))
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    waiting = "market-closing-orders@2025-11-26-205000.timer"
    ran(cfg, "closing-orders", "2025-11-26", at="2025-11-26T12:01:00.000Z")  # `run` at 12:01
    sc.calls.clear()
    result = sync.sync(cfg, now=datetime(2025, 11, 26, 12, 5, tzinfo=UTC), systemctl=sc,
                       stamp_dir=tmp_path)
    assert ("stop", (waiting,)) in sc.calls and waiting not in names(cfg.unit_dir)
    assert any(line.startswith(f"stop and delete {waiting}: closing-orders already ran")
               for line in result.lines())
    assert result.changes == []
    again = sync.sync(cfg, now=datetime(2025, 11, 26, 12, 6, tzinfo=UTC), systemctl=sc,
                      stamp_dir=tmp_path)
    assert waiting not in names(cfg.unit_dir) and not again.changed_anything


def test_a_run_recorded_before_the_ledger_existed_counts_as_started(write_config, tmp_path):
    """The day of the upgrade: the morning's run left only the old run record."""
    cfg = config.load(write_config(CLOSING.format(offset="-10min")))
    sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    old = cfg.state_dir / "runs" / "closing-orders" / "2025-11-26.json"
    old.parent.mkdir(parents=True)
    old.write_text('{"job": "closing-orders", "session": "2025-11-26", "pid": 7, '
                   '"started_utc": "2025-11-26T20:50:00.010Z", "result": "success"}\n')
    cfg = config.load(write_config(CLOSING.format(offset="-5min")))
    sync.sync(cfg, now=datetime(2025, 11, 26, 20, 52, tzinfo=UTC),
              systemctl=RecordingSystemctl(), stamp_dir=tmp_path)
    assert "market-closing-orders@2025-11-26-205500.timer" not in names(cfg.unit_dir)


# --- issue 9: a hand-made unit is never overwritten; a read-only unit_dir is a message -------

def test_hand_made_unit_with_a_planned_name_is_left_alone_with_a_warning(setup, tmp_path):
    _, cfg = setup()
    cfg.unit_dir.mkdir(parents=True)
    hand = cfg.unit_dir / "market-signal@2025-11-28-174500.service"
    hand.write_text("[Service]\nExecStart=/usr/local/bin/my-own-thing\n")
    sc = RecordingSystemctl()
    result = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert hand.read_text() == "[Service]\nExecStart=/usr/local/bin/my-own-thing\n"
    # Its timer would start the hand-made service: neither is written nor started.
    assert not (cfg.unit_dir / "market-signal@2025-11-28-174500.timer").exists()
    assert all("2025-11-28-174500" not in u for _, *units in sc.calls for u in units[0])
    assert result.foreign == [hand.name]
    assert any(line.startswith(f"warning: left {hand.name} alone") for line in result.lines())
    # The other fires are installed as usual, and a second sync keeps it that way.
    assert "market-signal@2025-11-26-204500.timer" in result.written
    again = sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path)
    assert hand.exists() and again.removed == [] and again.foreign == [hand.name]


def test_cli_sync_warns_on_stderr_about_a_hand_made_unit(setup, tmp_path, capsys, monkeypatch):
    from market_timers import cli

    path, cfg = setup()
    cfg.unit_dir.mkdir(parents=True)
    (cfg.unit_dir / "market-signal@2025-11-28-174500.timer").write_text("[Timer]\n")
    monkeypatch.setattr(sync, "Systemctl", RecordingSystemctl)
    monkeypatch.setattr(sync, "STAMP_DIR", tmp_path)
    assert cli.main(["--config", str(path), "--now", "2025-11-26T12:00:00Z", "sync"]) == 0
    err = capsys.readouterr().err
    assert "warning: left market-signal@2025-11-28-174500.timer alone" in err


def test_read_only_unit_dir_is_a_clear_error(setup, tmp_path, capsys, monkeypatch):
    import errno

    from market_timers import cli
    from market_timers.schedule import render

    def read_only(path, text, mode=0o644, **_):
        if path.parent == cfg.unit_dir:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return True

    path, cfg = setup()
    monkeypatch.setattr(sync, "write_atomic", read_only)
    monkeypatch.setattr(render, "write_atomic", read_only)
    monkeypatch.setattr(sync, "Systemctl", RecordingSystemctl)
    assert cli.main(["--config", str(path), "--now", "2025-11-26T12:00:00Z", "sync"]) == 1
    err = capsys.readouterr().err
    assert f"market-timers sync: cannot write units into {cfg.unit_dir}: Read-only file system" \
        in err and "Traceback" not in err


def test_units_are_written_as_one_batch_made_durable_before_systemd_is_told(setup, tmp_path,
                                                                          monkeypatch):
    """Each unit file is atomic (temp + rename); the batch is flushed once (syncfs + directory
    fsync), not one fsync + directory fsync per file, and before any start or reload, so
    systemd never loads a unit a power cut could still take away."""
    from market_timers.files import atomicfile

    _, cfg = setup()
    sc = RecordingSystemctl()
    events = []
    write = atomicfile.write
    monkeypatch.setattr(atomicfile, "write", lambda path, text, **kw: (
        events.append(("write", Path(path).name, kw.get("sync"))), write(path, text, **kw))[1])
    monkeypatch.setattr(atomicfile, "sync_directory",
                        lambda d: events.append(("flush", Path(d))))
    start = sc.start
    sc.start = lambda units: (events.append(("start",)), start(units))
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    units = [e for e in events if e[0] == "write" and e[1].startswith("market-signal@")]
    assert len(units) == 6 and {e[2] for e in units} == {atomicfile.BATCH}
    assert events.count(("flush", cfg.unit_dir)) == 1
    assert events.index(("flush", cfg.unit_dir)) < events.index(("start",))


# a plan.json that is not a plan -----------------------------------------------------------------

@pytest.mark.parametrize("text", ["{\"fires\": [", "[1, 2]", "\x00\x00garbage"])
def test_a_corrupt_plan_json_is_kept_aside_and_reported_not_silently_replaced(setup, tmp_path,
                                                                                text):
    """The deadman reads the passed fires from plan.json: a sync that rebuilds it from the plan
    alone loses them. The operator is told, and the corrupt file is kept for a post-mortem."""
    _, cfg = setup()
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / "plan.json").write_text(text)
    result = sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(),
                       stamp_dir=tmp_path / "stamps")
    aside = cfg.state_dir / "plan.json.corrupt-20251126T120000Z"
    assert aside.read_text() == text
    warning = [x for x in result.lines() if x.startswith("warning: ")]
    assert len(warning) == 1, result.lines()
    assert str(cfg.state_dir / "plan.json") in warning[0]
    assert "kept as plan.json.corrupt-20251126T120000Z" in warning[0]
    assert "dead-man check no longer knows the fires it listed that have passed" in warning[0]
    assert "`market-timers sync` rewrites it" not in warning[0]  # the reader's hint: done here
    plan = json.loads((cfg.state_dir / "plan.json").read_text())  # written anew
    assert len(plan["fires"]) == 3
    again = sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(),
                      stamp_dir=tmp_path / "stamps")
    assert not any(x.startswith("warning: ") for x in again.lines())


def test_a_dry_run_names_the_corrupt_plan_json_and_leaves_it(setup, tmp_path):
    _, cfg = setup()
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / "plan.json").write_text("not json")
    result = sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(), dry_run=True,
                       stamp_dir=tmp_path / "stamps")
    assert any("would keep it as plan.json.corrupt-" in x for x in result.lines())
    assert (cfg.state_dir / "plan.json").read_text() == "not json"
    assert not list(cfg.state_dir.glob("plan.json.corrupt-*"))


def test_a_missing_plan_json_is_no_warning(setup, tmp_path):
    _, cfg = setup()
    result = sync.sync(cfg, now=WED, systemctl=RecordingSystemctl(),
                       stamp_dir=tmp_path / "stamps")
    assert not any(x.startswith("warning: ") for x in result.lines())


def test_the_sync_command_prints_the_warning_on_stderr(setup, tmp_path, capsys, monkeypatch):
    from market_timers import cli

    path, cfg = setup()
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / "plan.json").write_text("{")
    monkeypatch.setattr(sync, "Systemctl", RecordingSystemctl)
    cli.main(["--config", str(path), "--now", "2025-11-26T12:00:00Z", "sync"])
    err = capsys.readouterr().err
    assert "market-timers sync: warning: " in err and "plan.json" in err and "not JSON" in err


def test_sync_starts_the_halt_listener_once_the_config_has_a_cluster(setup, tmp_path,
                                                                      monkeypatch):
    """Adding [cluster] and syncing is enough: the node's kill-switch listener
    (market-halt-watch.service) runs, so a halt made on another node stops this one's runs."""
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(tmp_path / "no-dsn"))  # readers fall back
    _, cfg = setup()
    sc = RecordingSystemctl()
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    assert "market-halt-watch.service" not in sc.active
    _, cfg = setup(SIGNAL + '\n[cluster]\nnode = "ny4-a"\n')
    sync.sync(cfg, now=WED, systemctl=sc, stamp_dir=tmp_path / "stamps")
    assert "market-halt-watch.service" in sc.active
