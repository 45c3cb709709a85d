"""One session rule of each kind on every calendar exchange_calendars ships, for 2025, against an
expectation computed here straight from exchange_calendars (its sessions and early_closes) and the
standard library's `calendar` module: never through market-timers' own code.

About 25 s: each calendar is built twice (here and by the plan), for one year and its margins.
"""

from __future__ import annotations

import calendar as stdcal
import re
import warnings
from datetime import date, timedelta

import exchange_calendars as xc
import pandas as pd
import pytest

from market_timers.config import loader as config
from market_timers.schedule import plan

YEAR = 2025
RULES = {
    "me1": 'period = "month"\nfrom = "end"\noffset = 1',  # the second-last session of a month
    "wed3": 'weekday = "wed"\nnth = 3\nif_closed = "next"',
    "early": 'early_close = "only"',
    "after": 'after_closure = "only"',
}


def job_name(cal: str, rule: str) -> str:
    return "s-" + re.sub(r"[^a-z0-9]+", "-", cal.lower()).strip("-") + "-" + rule


def direct(name: str) -> dict[str, list[date]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = xc.get_calendar(name, start=pd.Timestamp(YEAR - 1, 10, 1),
                              end=pd.Timestamp(YEAR + 1, 3, 31))
    sessions = [t.date() for t in cal.sessions]
    in_year = [d for d in sessions if d.year == YEAR]
    by_month: dict[int, list[date]] = {}
    for d in in_year:
        by_month.setdefault(d.month, []).append(d)
    me1 = [days[-2] for _, days in sorted(by_month.items()) if len(days) >= 2]
    wed3 = []
    for y, m in [(YEAR - 1, 12)] + [(YEAR, m) for m in range(1, 13)]:
        weds = [week[stdcal.WEDNESDAY] for week in stdcal.monthcalendar(y, m)
                if week[stdcal.WEDNESDAY]]
        nominal = date(y, m, weds[2])
        later = [d for d in sessions if d >= nominal]
        if later and later[0].year == YEAR and later[0] not in wed3:
            wed3.append(later[0])
    early = sorted(t.date() for t in cal.early_closes if t.year == YEAR)
    after = [d for prev, d in zip(sessions, sessions[1:], strict=False)
             if d.year == YEAR and (d - prev) > timedelta(days=3)]
    return {"me1": me1, "wed3": wed3, "early": early, "after": after}


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    names = sorted(xc.get_calendar_names(include_aliases=False))
    jobs = "".join(f'[[job]]\nname = "{job_name(c, r)}"\ncalendar = "{c}"\nevent = "close"\n'
                   f'command = ["/bin/true"]\n[job.sessions]\n{text}\n'
                   for c in names for r, text in RULES.items())
    path = tmp_path_factory.mktemp("sweep") / "market-timers.toml"
    path.write_text(jobs)
    result = plan.plan_between_partial(config.load(path), date(YEAR, 1, 1), date(YEAR, 12, 31))
    got: dict[str, list[date]] = {}
    for f in result.fires:
        got.setdefault(f.job, []).append(f.session)
    return names, got, {f.calendar for f in result.failures}


def test_every_calendar_every_rule_kind_matches_exchange_calendars(planned):
    names, got, failed = planned
    assert len(names) >= 60 and not failed
    assert all(len(got[job_name(n, "me1")]) == 12 for n in names)  # not an empty sweep
    wrong = []
    for name in names:
        want = direct(name)
        for rule in RULES:
            have = got.get(job_name(name, rule), [])
            if have != want[rule]:
                wrong.append(f"{name} {rule}: planned {sorted(set(have) ^ set(want[rule]))} "
                             "differently")
    assert not wrong, "\n".join(wrong)
