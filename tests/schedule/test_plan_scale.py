"""The planner's output, byte for byte, against fixtures produced by the row-by-row planner
before it was vectorised and its output streamed (tests/fixtures/plan_scale/config.toml says how).

Calendars with breaks, early closes, DST in both hemispheres, an overnight session, a half-hour
zone, a change of trading hours (XTKS 2024-11-05), skips, overrides and a daily UTC job; and a
digest of every calendar exchange_calendars ships over a year.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_timers import cli
from market_timers.config import loader as config
from market_timers.schedule import calendars, plan, planview

FIXTURES = Path(__file__).parents[1] / "fixtures" / "plan_scale"
CONFIG = FIXTURES / "config.toml"
# The fixtures hold exchange_calendars 4.13.2's data; another release may move a session.
PINNED = "4.13.2"
pinned = pytest.mark.skipif(calendars.version() != PINNED,
                            reason=f"fixtures recorded with exchange_calendars {PINNED}")


def run_cli(capsys, *argv: str) -> str:
    assert cli.main(["--config", str(argv[0]), *argv[1:]]) == 0
    return capsys.readouterr().out


def fixture(name: str) -> str:
    return gzip.decompress((FIXTURES / name).read_bytes()).decode()


@pinned
def test_plan_json_is_byte_for_byte_the_row_by_row_planners(capsys):
    got = run_cli(capsys, CONFIG, "plan", "--from", "2023-10-01", "--to", "2025-03-31", "--json")
    assert got == fixture("plan.json.gz")


@pinned
def test_plan_table_is_byte_for_byte_the_row_by_row_planners(capsys):
    got = run_cli(capsys, CONFIG, "plan", "--from", "2023-10-01", "--to", "2025-03-31")
    assert got == fixture("plan.txt.gz")


@pinned
def test_plan_ahead_is_byte_for_byte_the_row_by_row_planners(capsys):
    got = run_cli(capsys, CONFIG, "--now", "2024-12-20T12:00:00Z", "plan", "--json")
    assert got == fixture("ahead.json.gz")


@pinned
def test_every_calendar_over_a_year_matches_the_row_by_row_planner(capsys):
    got = run_cli(capsys, FIXTURES / "all-calendars.toml", "plan", "--from", "2024-01-01",
                  "--to", "2024-12-31", "--json")
    want = (FIXTURES / "all-calendars-2024.json.sha256").read_text().strip()
    assert hashlib.sha256(got.encode()).hexdigest() == want


def test_streamed_json_is_what_json_dumps_writes():
    cfg = config.load(CONFIG)
    fires = plan.plan_between(cfg, datetime(2024, 12, 23, tzinfo=UTC).date(),
                              datetime(2024, 12, 27, tzinfo=UTC).date())
    assert fires
    for chosen in (fires, fires[:1], []):
        out = io.StringIO()
        planview.write_json(out, chosen)
        assert out.getvalue() == json.dumps([f.to_json() for f in chosen], indent=2) + "\n"

