"""The Prometheus textfile: what an ops team's scrape sees after runs, syncs and dead-man passes.

Every check parses the file with prometheus_client's own parser, as node_exporter would read it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from market_timers import metrics
from market_timers.alerts.model import Alert
from market_timers.alerts.outbox import Outbox
from market_timers.config import loader as config
from market_timers.ledger import Key, runrecord
from market_timers.ledger.local import LocalLedger

NOW = datetime(2025, 11, 26, 21, 30, tzinfo=UTC)
CONFIG = """
calendar = "XNYS"
[metrics]
textfile = "{textfile}"
[[job]]
name = "signal"
event = "close"
offset = "-15min"
grace = "60s"
timeout = "4min"
command = ["/usr/bin/true"]
[[job]]
name = "report"
event = "close"
offset = "+30min"
command = ["/usr/bin/true"]
"""


@pytest.fixture
def setup(write_config, tmp_path: Path):
    prom_dir = tmp_path / "node-exporter"
    prom_dir.mkdir()

    def make(text: str = CONFIG, textfile: Path = prom_dir / "market_timers.prom"):
        path = write_config(text.format(textfile=textfile))
        cfg = config.load(path)
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        return cfg

    return make


def scrape(cfg) -> dict[str, dict]:
    """{family name: {"type": ..., "samples": {(sample name, labels...): value}}}."""
    text = Path(cfg.metrics.textfile).read_text()
    out = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = {"type": fam.type, "help": fam.documentation, "samples": {
            (s.name, *sorted(s.labels.items())): s.value for s in fam.samples}}
    return out


def value(fams: dict, sample: str, **labels) -> float | None:
    family = sample.removesuffix("_total")
    samples = fams.get(family, {}).get("samples", {})
    return samples.get((sample, *sorted(labels.items())))


def ran(cfg, job: str, session: str, *, started: datetime, status: str = "0",
        result: str = "success", code: str = "exited", late: float = 0.05, duration: float = 1.5,
        invocation: str | None = None, refused: str | None = None, force: bool = False) -> None:
    """A start in the run ledger as the runner and its ExecStopPost= leave it."""
    book = LocalLedger(str(cfg.state_dir))
    key = Key(job, session)
    invocation = invocation or f"inv-{job}-{session}-{started:%H%M%S}"
    fields = dict(scheduled_utc=(started - timedelta(seconds=late)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  started_utc=started.isoformat(timespec="milliseconds"), invocation=invocation,
                  late_sec=late, pid=1, host="h")
    if refused:
        book.refuse(key, dict(fields, refused=refused))
    else:
        assert book.claim(key, "forced" if force else "timer", fields).ok
    book.finish(key, invocation, dict(
        result=result, exit_code=code, exit_status=status, duration_sec=duration,
        finished_utc=(started + timedelta(seconds=duration)).isoformat(timespec="milliseconds")))


def write_plan(cfg, fires: list[tuple[str, str, str]], generated: str = "2025-11-26T06:00:00Z"):
    doc = {"generated_utc": generated, "fires": [
        {"job": j, "session": s, "fire_utc": t, "calendar": "XNYS", "grace_sec": 60,
         "timeout_sec": 240, "unit": f"market-{j}@{s}.timer"} for j, s, t in fires]}
    (cfg.state_dir / "plan.json").write_text(json.dumps(doc))


def test_after_runs_the_file_parses_and_says_what_happened(setup):
    cfg = setup()
    ran(cfg, "signal", "2025-11-25", started=datetime(2025, 11, 25, 20, 45, 0, 66000, UTC),
        late=0.066, duration=2.25)
    ran(cfg, "signal", "2025-11-26", started=datetime(2025, 11, 26, 20, 45, 0, 80000, UTC),
        status="3", result="exit-code", late=0.08, duration=4.0)
    ran(cfg, "report", "2025-11-26", started=datetime(2025, 11, 26, 21, 30, 0, 0, UTC),
        status="KILL", result="signal", code="killed", duration=0.5)
    write_plan(cfg, [("signal", "2025-11-28", "2025-11-28T17:45:00Z"),
                     ("signal", "2025-12-01", "2025-12-01T20:45:00Z"),
                     ("report", "2025-11-28", "2025-11-28T18:30:00Z")])

    assert metrics.update(cfg, NOW) == Path(cfg.metrics.textfile)
    fams = scrape(cfg)

    started = datetime(2025, 11, 26, 20, 45, 0, 80000, UTC).timestamp()
    assert value(fams, "market_timers_job_last_start_timestamp_seconds",
                 market_job="signal") == pytest.approx(started)
    assert value(fams, "market_timers_job_last_end_timestamp_seconds",
                 market_job="signal") == pytest.approx(started + 4.0)
    assert value(fams, "market_timers_job_last_exit_status", market_job="signal") == 3
    assert value(fams, "market_timers_job_last_exit_status", market_job="report") == 128 + 9
    assert value(fams, "market_timers_job_last_result", market_job="signal", kind="failed") == 1
    assert value(fams, "market_timers_job_last_result", market_job="signal", kind="ok") == 0
    assert value(fams, "market_timers_job_last_result", market_job="report", kind="killed") == 1
    assert value(fams, "market_timers_job_last_lateness_seconds", market_job="signal") == 0.08
    # a pre-fired run: the runner started 1.98 s before the instant and waited for it
    ran(cfg, "report", "2025-11-27", started=datetime(2025, 11, 27, 21, 29, 58, 20000, UTC),
        late=-1.98, duration=0.5)
    metrics.update(cfg, NOW)
    assert value(scrape(cfg), "market_timers_job_last_lateness_seconds", market_job="report") == 0
    assert value(fams, "market_timers_job_last_duration_seconds", market_job="signal") == 4.0
    assert value(fams, "market_timers_job_runs_total", market_job="signal") == 2
    assert value(fams, "market_timers_job_failures_total", market_job="signal", kind="failed") == 1
    assert value(fams, "market_timers_job_failures_total", market_job="signal",
                 kind="killed") == 0
    assert value(fams, "market_timers_job_failures_total", market_job="report",
                 kind="killed") == 1
    assert value(fams, "market_timers_job_sessions_missed_total", market_job="signal") == 0
    assert value(fams, "market_timers_job_next_fire_timestamp_seconds", market_job="signal") == \
        datetime(2025, 11, 28, 17, 45, tzinfo=UTC).timestamp()
    assert value(fams, "market_timers_last_sync_timestamp_seconds") == \
        datetime(2025, 11, 26, 6, tzinfo=UTC).timestamp()
    assert value(fams, "market_timers_metrics_generated_timestamp_seconds") == NOW.timestamp()
    assert fams["market_timers_job_runs"]["type"] == "counter"
    assert fams["market_timers_job_last_lateness_seconds"]["type"] == "gauge"
    assert all(name.startswith("market_timers_") and fam["help"] for name, fam in fams.items())


def test_the_format_is_the_classic_text_format_node_exporter_reads(setup):
    """HELP/TYPE lines name the sample (a counter's `_total` included), once per family."""
    cfg = setup()
    ran(cfg, "signal", "2025-11-26", started=NOW)
    metrics.update(cfg, NOW)
    text = Path(cfg.metrics.textfile).read_text()
    assert "# TYPE market_timers_job_runs_total counter\n" in text
    assert "# TYPE market_timers_job_runs counter" not in text
    assert text.endswith("\n") and "\n\n" not in text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(line.split("{")[0].split(" ")[0] in types for line in samples)


def test_a_job_removed_from_the_config_leaves_the_file(setup):
    cfg = setup()
    ran(cfg, "oldjob", "2025-11-20", started=NOW - timedelta(days=6))
    ran(cfg, "signal", "2025-11-26", started=NOW)
    metrics.update(cfg, NOW)
    fams = scrape(cfg)
    assert value(fams, "market_timers_job_runs_total", market_job="signal") == 1
    assert value(fams, "market_timers_job_runs_total", market_job="report") == 0  # never ran
    assert value(fams, "market_timers_job_runs_total", market_job="oldjob") is None


def test_label_values_are_escaped():
    fam = metrics.Family("calendar_data_end_timestamp_seconds", "gauge", "a help\\text\nline")
    fam.add(1.5, calendar='we"ird\\name\nx')
    parsed = list(text_string_to_metric_families(metrics.render([fam])))
    assert parsed[0].samples[0].labels == {"calendar": 'we"ird\\name\nx'}
    assert parsed[0].documentation == "a help\\text\nline"


def test_a_re_run_of_a_session_never_makes_a_counter_go_down(setup):
    """The run record of a session is replaced by its re-run; the counters count both runs."""
    cfg = setup()
    ran(cfg, "signal", "2025-11-26", started=NOW - timedelta(minutes=40), status="1",
        result="exit-code")
    metrics.update(cfg, NOW)
    ran(cfg, "signal", "2025-11-26", started=NOW - timedelta(minutes=5),
        force=True)  # fixed, re-run by hand with --force: attempt 2, ok
    metrics.update(cfg, NOW)
    metrics.update(cfg, NOW)  # nothing new: nothing counted twice
    fams = scrape(cfg)
    assert value(fams, "market_timers_job_runs_total", market_job="signal") == 2
    assert value(fams, "market_timers_job_failures_total", market_job="signal", kind="failed") == 1
    assert value(fams, "market_timers_job_last_result", market_job="signal", kind="ok") == 1


def test_refused_starts_are_runs_that_failed_by_their_kind(setup):
    cfg = setup()
    ran(cfg, "signal", "2025-11-25", started=NOW - timedelta(days=1), status="170",
        result="exit-code", refused="stale-start", late=300.0)
    ran(cfg, "report", "2025-11-26", started=NOW, status="171", result="exit-code",
        refused="overlap-skipped")
    metrics.update(cfg, NOW)
    fams = scrape(cfg)
    assert value(fams, "market_timers_job_failures_total", market_job="signal",
                 kind="stale-start") == 1
    assert value(fams, "market_timers_job_failures_total", market_job="report",
                 kind="overlap-skipped") == 1
    assert value(fams, "market_timers_job_last_lateness_seconds", market_job="signal") == 300.0


def test_a_missed_session_is_counted_once_and_stays_counted(setup):
    cfg = setup()
    write_plan(cfg, [("signal", "2025-11-25", "2025-11-25T20:45:00Z"),
                     ("report", "2025-11-25", "2025-11-25T21:30:00Z"),
                     ("signal", "2025-11-26", "2025-11-26T21:29:00Z")])  # not past its deadline
    ran(cfg, "report", "2025-11-25", started=datetime(2025, 11, 25, 21, 30, tzinfo=UTC))
    metrics.update(cfg, NOW)
    metrics.update(cfg, NOW + timedelta(minutes=1))
    fams = scrape(cfg)
    assert value(fams, "market_timers_job_sessions_missed_total", market_job="signal") == 1
    assert value(fams, "market_timers_job_sessions_missed_total", market_job="report") == 0
    write_plan(cfg, [])  # plan.json forgets past fires after its retention
    metrics.update(cfg, NOW + timedelta(days=9))
    assert value(scrape(cfg), "market_timers_job_sessions_missed_total",
                 market_job="signal") == 1


def test_outbox_pending_and_undeliverable_by_channel(setup):
    cfg = setup()
    box = Outbox(cfg.spool_dir)
    box.put(Alert(id="1126-0000000a", kind="failed", severity="critical", key="k1", title="t",
                  created="2025-11-26T21:00:00Z", chain=["telegram", "email"]))
    box.put(Alert(id="1126-0000000b", kind="failed", severity="critical", key="k2", title="t",
                  created="2025-11-26T21:10:00Z", chain=["telegram", "email"]))
    box.put(Alert(id="1126-0000000c", kind="failed", severity="warning", key="k3", title="t",
                  created="2025-11-26T20:00:00Z", chain=["slack"], channel_index=1,
                  state="undeliverable"))
    metrics.update(cfg, NOW)
    fams = scrape(cfg)
    assert value(fams, "market_timers_outbox_alerts", channel="telegram", state="pending") == 2
    assert value(fams, "market_timers_outbox_alerts", channel="slack", state="undeliverable") == 1
    assert value(fams, "market_timers_outbox_alerts", channel="email", state="pending") == 0
    from market_timers.channels import NAMES

    # every channel of the registry has its zero series, so an alerting rule on it (`outbox
    # stuck`) has a series to watch before the first alert of that channel
    for channel in NAMES:
        for state in ("pending", "undeliverable"):
            assert value(fams, "market_timers_outbox_alerts", channel=channel,
                         state=state) is not None, (channel, state)
    assert value(fams, "market_timers_outbox_oldest_alert_timestamp_seconds", channel="telegram",
                 state="pending") == datetime(2025, 11, 26, 21, tzinfo=UTC).timestamp()


def test_calendar_end_and_last_refresh(setup):
    cfg = setup()
    metrics.update(cfg, NOW, calendars={"XNYS": date(2026, 12, 31)}, refreshed=True)
    fams = scrape(cfg)
    assert value(fams, "market_timers_calendar_data_end_timestamp_seconds", calendar="XNYS") == \
        datetime(2026, 12, 31, tzinfo=UTC).timestamp()
    assert value(fams, "market_timers_last_refresh_timestamp_seconds") == NOW.timestamp()
    metrics.update(cfg, NOW + timedelta(minutes=1))  # a later writer keeps both
    fams = scrape(cfg)
    assert value(fams, "market_timers_last_refresh_timestamp_seconds") == NOW.timestamp()
    assert value(fams, "market_timers_calendar_data_end_timestamp_seconds", calendar="XNYS")


def test_nothing_is_written_without_the_directory_or_when_disabled(setup, tmp_path):
    cfg = setup(textfile=tmp_path / "not-installed" / "market_timers.prom")
    assert metrics.update(cfg, NOW) is None
    assert not (tmp_path / "not-installed").exists()
    assert not (cfg.state_dir / "metrics").exists()
    cfg = setup(CONFIG.replace("[metrics]", "[metrics]\nenabled = false"))
    assert metrics.update(cfg, NOW) is None
    assert not Path(cfg.metrics.textfile).exists()


def test_the_file_is_replaced_whole_and_readable_by_node_exporter(setup):
    cfg = setup()
    metrics.update(cfg, NOW)
    path = Path(cfg.metrics.textfile)
    first = path.stat().st_ino
    metrics.update(cfg, NOW)
    assert path.stat().st_ino != first  # renamed into place, never rewritten in place
    assert path.stat().st_mode & 0o777 == 0o644
    assert os.listdir(path.parent) == [path.name]  # no temporary file left behind


def _writer(path: str, n: int) -> None:
    cfg = config.load(path)
    for i in range(n):
        metrics.update(cfg, NOW + timedelta(seconds=i))


def test_concurrent_writers_count_each_run_once(setup):
    """Several processes regenerate at once (runs ending together, the deadman): under the lock
    the history gets each run exactly once and the file is always whole."""
    cfg = setup()
    for i in range(30):
        ran(cfg, "signal", f"2025-10-{i + 1:02d}", started=NOW - timedelta(days=40 - i))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(cfg.source, 5)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    history = metrics.State(cfg.state_dir).history()
    assert len(history) == len({e["key"] for e in history}) == 30
    assert value(scrape(cfg), "market_timers_job_runs_total", market_job="signal") == 30


def test_the_runners_record_step_writes_the_metrics(setup, tmp_path):
    """ExecStopPost= `market-timers-run --record` completes the record, then the textfile."""
    cfg = setup()
    env = dict(os.environ, MARKET_TIMERS_CONFIG=cfg.source, MARKET_JOB="signal",
               MARKET_SESSION="2025-11-26", MARKET_SCHEDULED_UTC="2025-11-26T20:45:00Z",
               MARKET_STATE_DIR=str(cfg.state_dir), MARKET_LOCK_DIR=str(tmp_path / "run"),
               MARKET_GRACE_SEC="99999999")
    env.pop("JOURNAL_STREAM", None)
    subprocess.run([sys.executable, "-m", "market_timers.run", "--", "/bin/true"], env=env,
                   check=True)
    env.update(SERVICE_RESULT="success", EXIT_CODE="exited", EXIT_STATUS="0")
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record"], env=env,
                   check=True)
    fams = scrape(cfg)
    assert value(fams, "market_timers_job_runs_total", market_job="signal") == 1
    assert value(fams, "market_timers_job_last_result", market_job="signal", kind="ok") == 1
    assert value(fams, "market_timers_job_last_lateness_seconds", market_job="signal") > 0


def test_a_broken_metrics_directory_never_fails_the_record_step(setup, tmp_path):
    cfg = setup()
    target = Path(cfg.metrics.textfile)
    target.mkdir()  # a directory where the file should be: the rename fails
    env = dict(MARKET_TIMERS_CONFIG=cfg.source, MARKET_JOB="signal", MARKET_SESSION="2025-11-26",
               MARKET_SCHEDULED_UTC="2025-11-26T20:45:00Z", MARKET_STATE_DIR=str(cfg.state_dir),
               SERVICE_RESULT="success", EXIT_CODE="exited", EXIT_STATUS="0")
    from market_timers.runner import record as runend

    os.environ["MARKET_TIMERS_CONFIG"] = cfg.source
    try:
        assert runend.record(env) == 0
    finally:
        del os.environ["MARKET_TIMERS_CONFIG"]
    assert runrecord.read(cfg.state_dir, "signal", "2025-11-26")["result"] == "success"


def test_the_runners_hot_path_does_not_import_the_metrics():
    code = "import sys, market_timers.runner; print('market_timers.metrics' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False"]


class QuietSystemctl:
    """Every timer is loaded and waiting; starts and stops succeed."""

    def show(self, units, props):
        return {u: {"LoadState": "loaded", "ActiveState": "active", "SubState": "waiting"}
                for u in units}

    def start(self, units):
        pass

    stop = reset_failed = start

    def daemon_reload(self):
        pass


def test_sync_and_refresh_write_the_plan_and_the_calendar_data_end(setup):
    from market_timers.cli import refresh
    from market_timers.cli.synced import after_sync
    from market_timers.schedule import calendars, sync

    cfg = setup(CONFIG + '[[job]]\nname = "shanghai"\ncalendar = "XSHG"\nevent = "open"\n'
                'command = ["/usr/bin/true"]\n')
    sync.sync(cfg, now=NOW, systemctl=QuietSystemctl(), stamp_dir=cfg.state_dir / "stamps")
    after_sync(cfg, NOW)  # as the sync command does
    fams = scrape(cfg)
    end = datetime.combine(calendars.last_session("XSHG"), datetime.min.time(), UTC)
    assert value(fams, "market_timers_calendar_data_end_timestamp_seconds",
                 calendar="XSHG") == end.timestamp()  # holidays kept as yearly tables: an end
    assert value(fams, "market_timers_calendar_data_end_timestamp_seconds",
                 calendar="XNYS") is None  # holidays from rules: no end
    assert value(fams, "market_timers_last_sync_timestamp_seconds") == NOW.timestamp()
    assert value(fams, "market_timers_job_next_fire_timestamp_seconds", market_job="signal") == \
        datetime(2025, 11, 28, 17, 45, tzinfo=UTC).timestamp()  # the early close after Thanksgiving
    assert value(fams, "market_timers_last_refresh_timestamp_seconds") is None
    import platform
    from importlib.metadata import version

    from market_timers import __version__
    assert value(fams, "market_timers_build_info", version=__version__,
                 python=platform.python_version(),
                 exchange_calendars=version("exchange_calendars")) == 1
    later = NOW + timedelta(hours=1)
    assert refresh.command(cfg, later, systemctl=QuietSystemctl(),
                           stamp_dir=cfg.state_dir / "stamps", alert=lambda *a, **k: None,
                           data_vintage=(date(2025, 6, 1), "test")) == 0
    assert value(scrape(cfg), "market_timers_last_refresh_timestamp_seconds") == \
        later.timestamp()


def test_a_dead_man_pass_counts_a_missed_session(setup):
    from market_timers.watch import deadman

    cfg = setup()
    write_plan(cfg, [("signal", "2025-11-25", "2025-11-25T20:45:00Z")])
    deadman.run_pass(cfg, NOW, systemctl=QuietSystemctl(), alert=lambda *a, **k: None,
                     ping=False)
    metrics.after_deadman(cfg, NOW)  # as the deadman command does after the pass
    assert value(scrape(cfg), "market_timers_job_sessions_missed_total", market_job="signal") == 1


# config ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, words", [
    ('"market_timers.prom"', "absolute path"),
    ('"/var/lib/prometheus/node-exporter/market_timers.txt"', "ending in .prom"),
    ('"/var/lib/prometheus/node-exporter/"', "not a directory"),
    ('"/market_timers.prom"', "directory of its own"),
    ("42", "non-empty string"),
])
def test_a_bad_textfile_is_refused_naming_the_key(write_config, capsys, value, words):
    from market_timers import cli

    path = write_config(f"[metrics]\ntextfile = {value}\n")
    assert cli.main(["--config", str(path), "plan"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: metrics.textfile:" in err and words in err


def test_unknown_metrics_keys_and_bad_enabled_are_refused(write_config, capsys):
    from market_timers import cli

    path = write_config('[metrics]\nenable = true\nenabled = "yes"\n')
    assert cli.main(["--config", str(path), "plan"]) == 2
    err = capsys.readouterr().err
    assert "metrics.enable: unknown key" in err and "metrics.enabled: must be true or false" in err


def test_the_metrics_keys_are_in_the_man_page():
    from tests.project.test_docs import MAN5, source, tags

    from market_timers.config import metrics as metrics_config

    missing = sorted(set(metrics_config.KEYS) - set(tags(source(MAN5))))
    assert not missing


def test_a_halt_in_force_is_a_gauge(setup):
    cfg = setup()
    controls = cfg.state_dir / "controls"
    controls.mkdir(mode=0o755)
    (controls / "halt-orders").write_text("scope=orders\nby=alice\nreason=x\n")
    (controls / "halt-group-fx").write_text("scope=group\nname=fx\nby=alice\nreason=x\n")
    metrics.update(cfg, NOW)
    fams = scrape(cfg)
    assert value(fams, "market_timers_halted", scope="orders", name="") == 1
    assert value(fams, "market_timers_halted", scope="group", name="fx") == 1
