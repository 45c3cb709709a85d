"""One calendar that fails (exchange_calendars cannot build it, its data has ended) costs only its
own jobs: the other calendars are planned and synced, the failure is named."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pytest

from market_timers import cli
from market_timers.config import loader as config
from market_timers.schedule import calendars, plan, sync

from .conftest import AlertRecorder, FakeSystemctl

TWO = """
horizon = 10

[[job]]
name = "ny"
calendar = "XNYS"
event = "close"
offset = "-15min"
command = ["/bin/true"]

[[job]]
name = "athens"
calendar = "ASEX"
event = "close"
command = ["/bin/true"]
"""
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def asex_fails(monkeypatch):
    """ASEX cannot be built (as on pandas 3: NotImplementedError in exchange_calendars)."""
    real = calendars._build

    def build(canonical, start, end):
        if canonical == "ASEX":
            raise NotImplementedError("OrthodoxEaster is not vectorised")
        return real(canonical, start, end)

    monkeypatch.setattr(calendars, "_build", build)


def test_plan_ahead_keeps_the_other_calendars_and_names_the_failed_one(write_config,
                                                                      asex_fails):
    cfg = config.load(write_config(TWO))
    result = plan.plan_ahead_partial(cfg, NOW)
    assert {f.job for f in result.fires} == {"ny"} and len(result.fires) == 10
    [failure] = result.failures
    assert (failure.calendar, failure.jobs) == ("ASEX", ("athens",))
    assert "NotImplementedError: OrthodoxEaster is not vectorised" in failure.reason
    with pytest.raises(calendars.CalendarError, match="calendar ASEX"):
        plan.plan_ahead(cfg, NOW)


def test_cli_plan_prints_the_rest_and_the_failure_on_stderr_and_exits_1(write_config,
                                                                         asex_fails, capsys):
    path = write_config(TWO)
    code = cli.main(["--config", str(path), "--now", "2026-12-01T12:00:00Z", "plan", "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert {e["job"] for e in json.loads(out)} == {"ny"}
    assert err.startswith("market-timers plan: calendar ASEX (job athens): ")
    assert "NotImplementedError" in err


def test_cli_plan_between_with_a_failing_calendar_still_prints_the_others(write_config,
                                                                          asex_fails, capsys):
    path = write_config(TWO)
    code = cli.main(["--config", str(path), "plan", "--from", "2026-12-14", "--to",
                     "2026-12-15"])
    out, err = capsys.readouterr()
    assert code == 1 and "ASEX" in err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["ny", "ny"]


def test_sync_installs_the_other_calendars_and_keeps_the_failed_ones_timers(
        write_config, tmp_path, monkeypatch):
    cfg = config.load(write_config(TWO))
    systemctl = FakeSystemctl(tmp_path / "units")
    systemctl.now = NOW
    first = sync.sync(cfg, now=NOW, systemctl=systemctl, stamp_dir=tmp_path / "stamps")
    athens = sorted(n for n in first.started if n.startswith("market-athens@"))
    assert athens and not first.failures
    real = calendars._build
    monkeypatch.setattr(calendars, "_build", lambda c, s, e: (
        (_ for _ in ()).throw(RuntimeError("broken")) if c == "ASEX" else real(c, s, e)))
    later = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    systemctl.now = later
    second = sync.sync(cfg, now=later, systemctl=systemctl, stamp_dir=tmp_path / "stamps")
    assert [f.calendar for f in second.failures] == ["ASEX"]
    assert not any(n.startswith("market-athens@") for n in second.removed)
    assert all((tmp_path / "units" / n).exists() for n in athens)
    assert any(n.startswith("market-ny@2026-12-15") for n in second.started)  # ny moved on
    planned = json.loads((cfg.state_dir / "plan.json").read_text())["fires"]
    # the deadman still watches the athens runs installed before the failure
    assert {e["session"] for e in planned if e["job"] == "athens"} >= {"2026-12-03"}


def test_refresh_alerts_critical_once_per_failed_calendar_and_syncs_the_rest(
        write_config, tmp_path, asex_fails):
    from market_timers.cli import refresh

    cfg = config.load(write_config(TWO))
    systemctl = FakeSystemctl(tmp_path / "units")
    alerts = AlertRecorder()
    code = refresh.command(cfg, NOW, systemctl=systemctl, alert=alerts,
                           stamp_dir=tmp_path / "stamps",
                           data_vintage=(date(2026, 11, 1), "test"))
    assert code == 1
    assert any(n.startswith("market-ny@") for n in systemctl.called("start"))
    failed = [c for c in alerts.calls if c["kind"] == "calendar-failed"]
    assert [(c["severity"], c["title"]) for c in failed] == [
        ("critical", "calendar ASEX could not be planned")]
    assert "calendar ASEX (job athens)" in failed[0]["text"]


def test_a_calendar_whose_data_has_ended_is_a_failure_naming_its_last_date(write_config):
    last = calendars.data_limits("XSHG")[1]  # 2026-12-31 in exchange_calendars 4.13
    cfg = config.load(write_config(TWO.replace('"ASEX"', '"XSHG"')))
    after = datetime(last.year + 1, 1, 4, 12, 0, tzinfo=UTC)
    result = plan.plan_ahead_partial(cfg, after)
    assert {f.job for f in result.fires} == {"ny"}
    [failure] = result.failures
    assert failure.calendar == "XSHG" and f"holidays up to {last} only" in failure.reason
