"""An upgrade from 0.1, which ran every job as the package's user: the data a job kept in its
`read_write_paths` is still its own after the upgrade, when it runs as a user of its own (issue 41:
"upgrades keep the jobs' data"). Given to that user by root's sync, never moved or deleted."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from market_timers.config import loader as config
from market_timers.schedule import legacydata

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files away")
PACKAGE, JOB_USER = 65534, 1  # the package's user (nobody here) and the job's own (daemon)
USERS = {"market-timers": SimpleNamespace(pw_uid=PACKAGE, pw_gid=PACKAGE),
         "market-job-orders": SimpleNamespace(pw_uid=JOB_USER, pw_gid=JOB_USER),
         "market-job-signal": SimpleNamespace(pw_uid=2, pw_gid=2)}


def job(name: str, *paths: str) -> str:
    return (f'\n[[job]]\nname = "{name}"\nevent = "close"\noffset = "-15min"\n'
            f'command = ["/usr/bin/true"]\nread_write_paths = {list(paths)!r}\n'.replace("'", '"'))


def owners(top) -> dict[str, int]:
    found = {str(top): os.lstat(top).st_uid}
    for where, dirs, files in os.walk(top):
        for name in dirs + files:
            found[os.path.join(where, name)] = os.lstat(os.path.join(where, name)).st_uid
    return found


def former_data(top, owner: int = PACKAGE):
    """A job's data directory as 0.1 left it: the package's user's, a file and a folder in it."""
    (top / "positions").mkdir(parents=True)
    (top / "positions" / "today.csv").write_text("AAPL,100\n")
    (top / "sent.log").write_text("sent attempt=1\n")
    for path in (top, top / "positions", top / "positions" / "today.csv", top / "sent.log"):
        os.lchown(path, owner, owner)
    return top


def give(cfg) -> None:
    legacydata.give_to_own_users(cfg, lookup=USERS.__getitem__)


@root_only
def test_a_jobs_data_of_the_package_user_is_given_to_its_own_user_and_kept(
        write_config, tmp_path, capsys):
    data = former_data(tmp_path / "orders-data")
    give(config.load(write_config('calendar = "XNYS"\n' + job("orders", str(data)))))
    assert set(owners(data).values()) == {JOB_USER}
    assert (data / "sent.log").read_text() == "sent attempt=1\n"
    assert os.lstat(data / "sent.log").st_gid == JOB_USER
    err = capsys.readouterr().err
    assert f"{data}" in err and "market-job-orders" in err and "4 files" in err
    give(config.load(write_config('calendar = "XNYS"\n' + job("orders", str(data)))))
    assert capsys.readouterr().err == ""  # given once: nothing left to say


@root_only
def test_data_of_another_user_a_shared_path_and_the_schedulers_own_are_left_alone(
        write_config, tmp_path, capsys):
    others = former_data(tmp_path / "admins", owner=0)
    shared = former_data(tmp_path / "weights")
    state = tmp_path / "state"
    former_data(state / "orders")
    (tmp_path / "spool").mkdir()
    os.lchown(tmp_path / "spool", PACKAGE, PACKAGE)
    text = ('calendar = "XNYS"\n' + job("orders", str(others), str(shared), str(state / "orders"),
                                       str(tmp_path / "spool")) + job("signal", str(shared)))
    give(config.load(write_config(text)))
    assert set(owners(others).values()) == {0}
    assert set(owners(shared).values()) == {PACKAGE}
    assert set(owners(state / "orders").values()) == {PACKAGE}
    assert os.lstat(tmp_path / "spool").st_uid == PACKAGE
    err = capsys.readouterr().err
    assert f"{shared}" in err and "orders, signal" in err and "[shared]" in err
    assert f"{state / 'orders'}" in err and "the scheduler's" in err
    assert f"{tmp_path / 'spool'} " not in err  # the spool itself (the digest job's): not a word


def test_a_job_of_a_named_user_or_a_host_without_the_package_user_is_not_looked_at(
        write_config, tmp_path, capsys):
    data = tmp_path / "orders-data"
    cfg = config.load(write_config('calendar = "XNYS"\nuser = "market-jobs"\n'
                                   + job("orders", str(data))))
    legacydata.give_to_own_users(cfg, lookup=USERS.__getitem__)
    cfg = config.load(write_config('calendar = "XNYS"\n' + job("orders", str(data))))
    legacydata.give_to_own_users(cfg, lookup={}.__getitem__)
    assert capsys.readouterr().err == ""
