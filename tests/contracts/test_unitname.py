"""Unit names: every form round-trips through unitname, and the names the golden units, the
alert handler and the e2e scenario use are the ones it builds."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from market_timers.config import jobs as job_config
from market_timers.contracts import unitname

GOLDEN = Path(__file__).parents[1] / "golden" / "units"
AT = datetime(2025, 11, 26, 20, 45, 0, tzinfo=UTC)


@pytest.mark.parametrize("name", [
    unitname.fire("signal", date(2025, 11, 26), AT),
    unitname.periodic("cycle", date(2026, 11, 30), datetime(2026, 11, 30, 14, 20, tzinfo=UTC),
                      "abcdef"),
    unitname.daily("nightly"),
    unitname.trial("signal", "try-20251126T120005Z"),
    unitname.manual_run("closing-orders", date(2025, 11, 26), datetime(2025, 11, 26, 21, 30,
                                                                       tzinfo=UTC)),
])
def test_every_form_round_trips_with_either_suffix(name):
    assert unitname.parse(name.stem) == name
    assert unitname.parse(name.timer()) == name
    assert unitname.parse(name.service()) == name


def test_the_forms_as_users_see_them():
    assert unitname.fire("signal", date(2025, 11, 26), AT).timer() == \
        "market-signal@2025-11-26-204500.timer"
    assert unitname.periodic("cycle", date(2026, 11, 30),
                             datetime(2026, 11, 30, 14, 20, tzinfo=UTC), "abcdef").service() == \
        "market-cycle@2026-11-30-142000-abcdef.service"
    assert unitname.daily("nightly").timer() == "market-nightly@daily.timer"
    assert unitname.trial("signal", "try-20251126T120005Z").stem == \
        "market-signal@try-20251126T120005Z"
    assert unitname.manual_run("closing-orders", date(2025, 11, 26),
                               datetime(2025, 11, 26, 21, 30, tzinfo=UTC)).service() == \
        "market-closing-orders@2025-11-26-run213000.service"


@pytest.mark.parametrize("job", ["a", "close-report", "pre_open", "x-2025-11-26-204500",
                                 "daily", "run", "try-1", "a" * 40])
def test_job_names_the_config_allows_round_trip(job):
    assert job_config.JOB_NAME.match(job)
    for name in (unitname.fire(job, date(2025, 11, 26), AT), unitname.daily(job),
                 unitname.manual_run(job, date(2025, 11, 26), AT)):
        got = unitname.parse(name.service())
        assert got == name and got.job == job


def test_a_job_name_with_an_at_sign_is_not_a_job_unit():
    assert not job_config.JOB_NAME.match("a@b")  # the config refuses it: the first '@' ends the job
    assert unitname.parse("market-a@b@2025-11-26-204500.service") is None


@pytest.mark.parametrize("name", [
    "market-deadman.service", "market-refresh.timer", "market-alert-failure@.service",
    "market-alert-success@market-signal@2025-11-26-204500.service.service",
    "market-signal@2025-11-26.timer", "market-signal@2025-11-26-2045.timer",
    "market-signal@2025-11-26-204500.socket", "market-signal@tomorrow.timer",
    "market-signal@2025-11-26-run204500-abcdef.service", "market-@daily.timer",
    "other-signal@2025-11-26-204500.timer", "signal@2025-11-26-204500.timer", ""])
def test_a_name_not_ours_is_none(name):
    assert unitname.parse(name) is None and not unitname.is_ours(name)


def test_the_golden_units_are_named_by_unitname():
    names = sorted(p.name for p in GOLDEN.iterdir())
    assert names  # the golden files exist
    parsed = [unitname.parse(n) for n in names]
    assert all(parsed)
    assert {(u.job, u.kind) for u in parsed} == {
        ("lunch", unitname.FIRE), ("nightly", unitname.DAILY), ("signal", unitname.FIRE),
        ("rebalance", unitname.FIRE)}
    assert {u.timer() for u in parsed} | {u.service() for u in parsed} == set(names)
    assert unitname.parse("market-lunch@2025-11-28-040105.timer").scheduled_utc == \
        "2025-11-28T04:01:05Z"


def test_a_fire_tells_its_scheduled_instant_the_others_do_not():
    assert unitname.parse("market-close-report@2026-11-30-205500.service").scheduled_utc == \
        "2026-11-30T20:55:00Z"
    assert unitname.parse("market-cycle@2026-11-30-142000-abcdef.service").scheduled_utc == ""
    assert unitname.daily("nightly").scheduled_utc == ""


def test_split_and_helpers_take_any_market_name():
    assert unitname.split("market-signal@weird.timer") == ("signal", "weird")
    assert unitname.split("market-nightly@daily.timer") == ("nightly", "daily")
    assert unitname.service_of("market-signal@2025-11-26-204500.timer") == \
        "market-signal@2025-11-26-204500.service"
    assert unitname.timer_of("market-signal@2025-11-26-204500.service") == \
        "market-signal@2025-11-26-204500.timer"
    assert unitname.session_glob("signal", "2025-11-26") == "market-signal@2025-11-26*"


def test_unitname_imports_nothing_of_market_timers():
    """The OnFailure= handler imports it: stdlib only."""
    source = Path(unitname.__file__).read_text()
    assert "from ." not in source and "import market_timers" not in source
