"""The nice value a pre-fired job runs at (runner/nice.py): the one its unit would give it without
the lead, so that nothing in the runner undoes a drop-in's `Nice=` (README, "Adding a directive
the config does not offer: drop-ins"; issue 22).

A pre-fired unit has Nice=-10 for the runner's wait; a drop-in's Nice= replaces it, so the runner
starts at the drop-in's value. These check the decision on a fake unit search path; the runner's
real processes are in test_prefire.py and test_exec_at.py, a real systemd in
tests/e2e/test_dropins.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from market_timers.contracts.environment import PRE_FIRE_NICE
from market_timers.runner import nice

UNIT = "market-close-orders@2025-11-26-204500.service"
LEAD = {"MARKET_LEAD_SEC": "2"}


@pytest.fixture
def search(tmp_path: Path):
    """A unit search path of three directories, in systemd's order: etc, run, lib."""
    bases = tuple(str(tmp_path / b) for b in ("etc", "run", "lib"))

    def dropin(base: str, directory: str, name: str, text: str) -> Path:
        path = Path(bases[("etc", "run", "lib").index(base)]) / directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    dropin.bases = bases
    return dropin


def decide(search, current: int = PRE_FIRE_NICE, env: dict = LEAD):
    return nice.job_nice(env, current=current, unit=UNIT, search_path=search.bases)


def test_a_pre_fired_job_without_a_drop_in_returns_to_nice_0(search):
    assert decide(search) == 0


@pytest.mark.parametrize("start", [5, 0, -5, -15, 19, -20])
def test_any_other_start_value_is_a_drop_ins_and_is_kept(search, start):
    """systemd applies the last Nice= it reads, a drop-in's after the unit's own -10."""
    assert decide(search, current=start) is None


def test_a_job_without_a_lead_is_never_reniced(search):
    assert decide(search, env={}) is None
    assert decide(search, env={"MARKET_LEAD_SEC": "0"}) is None


@pytest.mark.parametrize("directory", [
    "market-close-orders@2025-11-26-204500.service.d",  # this session's unit only
    "market-close-orders@.service.d",  # every session of the job: the documented place
    "market-close-.service.d",  # systemd cuts the name after each dash
    "market-.service.d",
    "service.d",  # every service
])
def test_a_drop_ins_own_nice_minus_10_is_kept(search, directory):
    search("etc", directory, "limits.conf", "[Service]\nCPUQuota=50%\nNice=-10\n")
    assert decide(search) is None


def test_the_drop_in_directories_are_those_systemd_reads():
    assert nice.dropin_dirs(UNIT) == [
        "market-close-orders@2025-11-26-204500.service.d", "market-close-orders@.service.d",
        "market-close-.service.d", "market-.service.d", "service.d"]
    assert nice.dropin_dirs("market-nightly@daily.service") == [
        "market-nightly@daily.service.d", "market-nightly@.service.d", "market-.service.d",
        "service.d"]


@pytest.mark.parametrize("text", [
    "[Unit]\nNice=-10\n",  # not the [Service] section: systemd ignores it there
    "[Service]\n# Nice=-10\n; Nice=-10\n",
    "[Service]\nNice=-10\nNice=\n",  # an empty assignment removes the setting
    "[Service]\nNice=-10\nNice=5\n",  # 5 wins: a -10 seen now is the unit's (no daemon-reload)
    "[Service]\nEnvironment=NICE=-10\n",
])
def test_a_drop_in_that_does_not_end_on_nice_minus_10_returns_the_job_to_0(search, text):
    search("etc", "market-close-orders@.service.d", "limits.conf", text)
    assert decide(search) == 0


def test_the_last_nice_in_file_name_order_counts_across_directories(search):
    search("lib", "market-.service.d", "90-late.conf", "[Service]\nNice=-10\n")
    search("etc", "market-close-orders@.service.d", "10-early.conf", "[Service]\nNice=3\n")
    assert decide(search) is None  # 90-late.conf is applied last, wherever it lies
    search("etc", "market-close-orders@.service.d", "95-last.conf", "[Service]\nNice=\n")
    assert decide(search) == 0


def test_a_file_of_the_same_name_earlier_in_the_search_path_hides_the_other(search):
    search("lib", "market-close-orders@.service.d", "nice.conf", "[Service]\nNice=-10\n")
    assert decide(search) is None
    search("etc", "market-.service.d", "nice.conf", "[Service]\nCPUQuota=50%\n")
    assert decide(search) == 0  # /etc's nice.conf, even for a less specific unit name
    os.remove(Path(search.bases[0]) / "market-.service.d" / "nice.conf")
    os.symlink("/dev/null", Path(search.bases[0]) / "market-.service.d" / "nice.conf")
    assert decide(search) == 0  # masked


def test_systemd_syntax_continuations_spaces_signs_and_invalid_values(search):
    d = "market-close-orders@.service.d"
    search("etc", d, "a.conf", "[Service]\nNice = -10 \n")
    assert decide(search) is None
    search("etc", d, "b.conf", "[Service]\nNice=abc\nNice=-99\n")  # invalid: skipped
    assert decide(search) is None
    search("etc", d, "c.conf", "[Service]\nEnvironment=A=1 \\\n  Nice=3\n")
    assert decide(search) is None  # one line, Environment=: no Nice= in it
    search("etc", d, "d.conf", "[Service]\nNice=+2\n")
    assert decide(search) == 0


def test_only_conf_files_that_are_not_hidden_are_drop_ins(search):
    d = "market-close-orders@.service.d"
    search("etc", d, "nice.conf.disabled", "[Service]\nNice=-10\n")
    search("etc", d, ".nice.conf", "[Service]\nNice=-10\n")
    assert decide(search) == 0


def test_the_unit_is_read_from_the_processs_cgroup(tmp_path):
    v2 = tmp_path / "v2"
    v2.write_text(f"0::/system.slice/{UNIT}\n")
    hybrid = tmp_path / "hybrid"
    hybrid.write_text(f"12:cpuset:/\n1:name=systemd:/system.slice/{UNIT}\n"
                      f"0::/system.slice/{UNIT}\n")
    by_hand = tmp_path / "by-hand"
    by_hand.write_text("0::/user.slice/user-0.slice/session-3.scope\n")
    assert nice.unit_name(str(v2)) == nice.unit_name(str(hybrid)) == UNIT
    assert nice.unit_name(str(by_hand)) is None
    assert nice.unit_name(str(tmp_path / "missing")) is None
