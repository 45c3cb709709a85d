"""The metrics read only the ledger's key directories that changed since the previous scan
(metrics/scan.py), and still count every run exactly once.

A real scan follows each other by minutes while the kernel stamps each change; here a fake clock
stands in for both: every ledger change stamps its key directory with the clock (as the kernel
would), and each scan reads the clock. Without it every directory would be younger than the
scan's margin and every scan would read everything, so these tests could not fail.
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from market_timers import metrics
from market_timers.config import loader as config
from market_timers.ledger import Key
from market_timers.ledger.local import LocalLedger
from market_timers.metrics import scan

NOW = datetime(2025, 11, 26, 21, 30, tzinfo=UTC)
CONFIG = """
calendar = "XNYS"
[metrics]
textfile = "{textfile}"
[[job]]
name = "poll"
every = "5min"
command = ["/usr/bin/true"]
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""
MINUTE_NS = 60 * 10**9


class Clock:
    """The scans' clock and the kernel's stamps on the key directories, in ns."""

    def __init__(self):
        self.ns = int(NOW.timestamp()) * 10**9

    def tick(self, minutes: float = 1) -> None:
        self.ns += int(minutes * MINUTE_NS)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(scan.time, "time_ns", lambda: c.ns)
    return c


@pytest.fixture
def cfg(write_config, tmp_path: Path):
    prom = tmp_path / "node-exporter"
    prom.mkdir()
    c = config.load(write_config(CONFIG.format(textfile=prom / "market_timers.prom")))
    c.state_dir.mkdir(parents=True, exist_ok=True)
    return c


class World:
    """The ledger as runners leave it, and what the metrics should then say (counted here from
    what was done, not from the ledger)."""

    def __init__(self, cfg, clock: Clock):
        self.cfg, self.clock = cfg, clock
        self.book = LocalLedger(str(cfg.state_dir))
        self.runs: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.last_start: dict[str, float] = {}
        self.n = 0

    def key_dir(self, key: Key) -> Path:
        return self.cfg.state_dir / "ledger" / key.job / key.name

    def stamp(self, key: Key, ns: int | None = None) -> None:
        ns = self.clock.ns if ns is None else ns
        os.utime(self.key_dir(key), ns=(ns, ns))

    def start(self, key: Key, *, force: bool = False, refused: str | None = None) -> str:
        self.n += 1
        started = datetime.fromtimestamp(self.clock.ns / 1e9, UTC) + timedelta(
            microseconds=self.n)  # distinct and increasing, as real starts are
        invocation = f"inv-{self.n}"
        fields = dict(scheduled_utc=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      started_utc=started.isoformat(timespec="microseconds"),
                      invocation=invocation, late_sec=0.01, pid=1, host="h")
        if refused:
            self.book.refuse(key, dict(fields, refused=refused))
        else:
            assert self.book.claim(key, "forced" if force else "timer", fields).ok
        self.stamp(key)
        self.last_start[key.job] = started.timestamp()
        return invocation

    def finish(self, key: Key, invocation: str, ok: bool = True) -> None:
        self.book.finish(key, invocation, dict(
            result="success" if ok else "exit-code", exit_code="exited",
            exit_status="0" if ok else "1", duration_sec=1.0,
            finished_utc=datetime.fromtimestamp(self.clock.ns / 1e9, UTC).isoformat()))
        self.stamp(key)
        self.runs[key.job] = self.runs.get(key.job, 0) + 1
        if not ok:
            self.failed[key.job] = self.failed.get(key.job, 0) + 1

    def run(self, key: Key, ok: bool = True, force: bool = False) -> None:
        self.finish(key, self.start(key, force=force), ok)

    def update(self) -> dict:
        metrics.update(self.cfg, NOW)
        return scrape(self.cfg)

    def assert_counted(self, fams: dict) -> None:
        for job in ("poll", "signal"):
            assert sample(fams, "market_timers_job_runs_total", market_job=job) == \
                self.runs.get(job, 0), job
            assert sample(fams, "market_timers_job_failures_total", market_job=job,
                          kind="failed") == self.failed.get(job, 0), job
            if job in self.last_start:
                assert sample(fams, "market_timers_job_last_start_timestamp_seconds",
                              market_job=job) == pytest.approx(self.last_start[job]), job


def scrape(cfg) -> dict:
    text = Path(cfg.metrics.textfile).read_text()
    return {(s.name, *sorted(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def sample(fams: dict, name: str, **labels) -> float | None:
    return fams.get((name, *sorted(labels.items())))


def slot(i: int) -> Key:
    t = datetime(2025, 1, 2, 14, 30, tzinfo=UTC) + timedelta(minutes=5 * i)
    return Key("poll", t.date().isoformat(), t.strftime("%H%M%S"))


def scanned(cfg) -> scan.LedgerView:
    """What a writer's scan would read now (this one keeps no note: it counts nothing)."""
    state = metrics.State(cfg.state_dir)
    with state.lock():
        return scan.read(state)


@pytest.fixture
def world(cfg, clock) -> World:
    return World(cfg, clock)


def test_a_quiet_ledger_is_not_read_again_and_its_runs_stay_counted(world, cfg, clock):
    for i in range(30):
        world.run(slot(i), ok=i % 7 != 0)
        clock.tick(5)
    world.assert_counted(world.update())
    clock.tick(10)
    view = scanned(cfg)
    assert not view.full and view.records == []  # nothing changed: nothing read
    assert view.ran == {("poll", "2025-01-02")} and view.last["poll"]["invocation"] == "inv-30"
    world.assert_counted(world.update())


def test_runs_since_the_last_scan_are_counted_once_each(world, cfg, clock):
    for i in range(10):
        world.run(slot(i))
        clock.tick(5)
    world.update()
    world.run(slot(10), ok=False)
    clock.tick(5)
    view = scanned(cfg)
    assert [r["invocation"] for r in view.records] == ["inv-11"]
    world.assert_counted(world.update())
    world.assert_counted(world.update())  # nothing new: nothing counted twice


def test_a_forced_re_run_of_an_old_session_is_counted(world, cfg, clock):
    """Attempt 2 in a key directory last read long ago: its mtime moves, it is read again."""
    old = Key("signal", "2025-01-02")
    world.run(old, ok=False)
    clock.tick(60 * 24 * 30)
    for i in range(5):
        world.run(slot(i))
        clock.tick(5)
    world.update()
    clock.tick(60)
    world.run(old, force=True)
    clock.tick(1)
    world.assert_counted(world.update())


def test_a_run_still_running_at_a_scan_is_counted_when_it_ends(world, cfg, clock):
    key = slot(0)
    invocation = world.start(key)
    clock.tick(1)
    world.assert_counted(world.update())  # started, not ended: no run counted yet
    clock.tick(120)  # a long job: its directory is old by the time it ends
    world.finish(key, invocation)
    clock.tick(1)
    world.assert_counted(world.update())


def test_a_claim_whose_fields_come_late_is_read_when_they_come(world, cfg, clock):
    """The one ledger write that creates no name: a claim's fields, written just after the
    claim's creation. A scan in between sees an empty claim; that key is read again."""
    key = slot(0)
    world.key_dir(key).mkdir(parents=True)
    claim = world.key_dir(key) / "attempt-1"
    claim.touch()
    world.stamp(key)
    clock.tick(1)
    world.update()
    clock.tick(30)
    stamp = world.clock.ns - 30 * MINUTE_NS
    claim.unlink()
    invocation = world.start(key)  # the fields, and the result at the end
    world.finish(key, invocation)
    world.stamp(key, stamp)  # as if neither had touched the directory's mtime
    clock.tick(1)
    world.assert_counted(world.update())


def test_a_change_stamped_just_before_the_previous_scan_is_still_read(world, cfg, clock):
    """The kernel stamps with a coarse clock: a change made after a scan may carry a stamp a
    little earlier than that scan's start."""
    world.run(slot(0))
    clock.tick(10)
    world.update()
    before = world.clock.ns - 2 * 10**9  # within scan.MARGIN_NS of the previous start
    clock.tick(5)
    key = slot(1)
    world.run(key)
    world.stamp(key, before)
    world.assert_counted(world.update())


def test_an_empty_key_directory_is_a_miss_and_is_read_again_until_a_start_is_in_it(
        world, cfg, clock):
    """A runner that died between making the key's directory and its claim: nothing ran."""
    plan = {"generated_utc": "2025-11-26T06:00:00Z", "fires": [
        {"job": "signal", "session": "2025-11-25", "fire_utc": "2025-11-25T20:45:00Z",
         "calendar": "XNYS", "grace_sec": 60, "timeout_sec": 240,
         "unit": "market-signal@2025-11-25.timer"}]}
    (cfg.state_dir / "plan.json").write_text(json.dumps(plan))
    key = Key("signal", "2025-11-25")
    world.key_dir(key).mkdir(parents=True)
    world.stamp(key)
    clock.tick(10)
    fams = world.update()
    assert sample(fams, "market_timers_job_sessions_missed_total", market_job="signal") == 1
    clock.tick(60)
    assert ("signal", "2025-11-25") not in scanned(cfg).ran  # read again: still empty
    clock.tick(60)
    world.run(key)
    world.stamp(key, world.clock.ns - 120 * MINUTE_NS)  # an old stamp: read all the same
    clock.tick(1)
    assert ("signal", "2025-11-25") in scanned(cfg).ran


@pytest.mark.parametrize("note", [
    "not json", "[]", '{"version": 99}',
    '{"version": 1, "started_ns": "x", "full_ns": 0, "again": [], "last": {}}',
    '{"version": 1, "started_ns": 1, "full_ns": 2, "again": [], "last": {}}',
    '{"version": 1, "started_ns": 5, "full_ns": 5, "again": [3], "last": {}}',
    '{"version": 1, "started_ns": 5, "full_ns": 5, "again": [], "last": {"poll": 1}}',
])
def test_a_damaged_note_means_a_full_scan_that_counts_nothing_twice(world, cfg, clock, note):
    for i in range(5):
        world.run(slot(i))
        clock.tick(5)
    world.update()
    (cfg.state_dir / "metrics" / scan.NAME).write_text(note)
    clock.tick(5)
    assert scanned(cfg).full
    world.assert_counted(world.update())


def test_a_clock_stepped_back_or_a_day_gone_by_means_a_full_scan(world, cfg, clock):
    world.run(slot(0))
    clock.tick(1)
    assert scanned(cfg).full  # no note yet
    world.update()
    clock.tick(1)
    assert not scanned(cfg).full
    clock.tick(-30)  # stepped back past the previous scan
    assert scanned(cfg).full
    clock.tick(30 + 60 * 24 - 3)
    assert not scanned(cfg).full
    clock.tick(3)  # a day after the last full scan
    assert scanned(cfg).full


def test_symlinks_and_files_in_the_ledger_are_never_read(world, cfg, clock, tmp_path):
    world.run(slot(0))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "attempt-1").write_text("job=poll\n")
    jobdir = cfg.state_dir / "ledger" / "poll"
    (jobdir / "2025-01-03+143000").symlink_to(elsewhere)
    (jobdir / "2025-01-03+143500").write_text("not a directory")
    clock.tick(1)
    view = scanned(cfg)
    assert [r["session"] for r in view.records] == ["2025-01-02"]
    world.assert_counted(world.update())


def test_legacy_records_are_counted_once(world, cfg, clock):
    legacy = cfg.state_dir / "runs" / "signal"
    legacy.mkdir(parents=True)
    (legacy / "2024-06-03.json").write_text(json.dumps({
        "job": "signal", "session": "2024-06-03", "result": "success", "exit_code": "exited",
        "exit_status": "0", "started_utc": "2024-06-03T19:45:00Z",
        "finished_utc": "2024-06-03T19:45:01Z", "invocation": "legacy-1"}))
    world.runs["signal"] = 1
    world.update()
    clock.tick(10)
    world.run(slot(0))
    world.assert_counted(world.update())


@pytest.mark.parametrize("seed", range(4))
def test_any_sequence_counts_what_a_full_read_counts(world, cfg, clock, seed):
    """Runs, failures, long runs, forced re-runs of old sessions and refused starts, in a random
    order with scans between: the counters and last runs are the ones counted from what was
    done, and a full read (the note removed) finds nothing more to count."""
    rng = random.Random(seed)
    running: list[tuple[Key, str]] = []
    done: list[Key] = []
    i = 0
    for _ in range(120):
        op = rng.random()
        if op < 0.45:
            key, i = slot(i), i + 1
            world.run(key, ok=rng.random() > 0.2)
            done.append(key)
        elif op < 0.55:
            key, i = slot(i), i + 1
            running.append((key, world.start(key)))
        elif op < 0.65 and running:
            world.finish(*running.pop(rng.randrange(len(running))))
        elif op < 0.72 and done:
            world.run(rng.choice(done), force=True)
        elif op < 0.78 and done:
            key = rng.choice(done)
            world.finish(key, world.start(key, refused="overlap-skipped"), ok=False)
        elif op < 0.9:
            world.assert_counted(world.update())
        clock.tick(rng.choice([0.01, 1, 5, 60, 600]))
    world.assert_counted(world.update())
    before = scrape(cfg)
    (cfg.state_dir / "metrics" / scan.NAME).unlink()
    after = world.update()
    generated = ("market_timers_metrics_generated_timestamp_seconds",)
    assert {k: v for k, v in after.items() if k != generated} == \
        {k: v for k, v in before.items() if k != generated}
