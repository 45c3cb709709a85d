"""Jobs kept apart (issue 41): each job runs as a user of its own unless the config names one;
jobs share data only through a directory the config names and they list; a job's secrets are
never given to a user that another job runs as."""

from __future__ import annotations

import pytest
from tests.config.test_config import at

from market_timers.config import loader as config
from market_timers.schema.problems import ConfigError

TOP = 'calendar = "XNYS"\n'


def job(name: str, *lines: str) -> str:
    return (f'\n[[job]]\nname = "{name}"\nevent = "close"\noffset = "-15min"\n'
            'command = ["/usr/bin/true"]\n' + "".join(line + "\n" for line in lines))


def problems(write_config, text: str) -> tuple[str, list[str]]:
    path = write_config(text)
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    return str(path), exc.value.problems.lines()


def test_each_job_runs_as_a_user_of_its_own_by_default(write_config):
    cfg = config.load(write_config(TOP + job("signal") + job("orders")))
    assert [cfg.user_of(j) for j in cfg.jobs] == ["market-job-signal", "market-job-orders"]
    assert [cfg.home_of(j) for j in cfg.jobs] == ["/var/lib/market-timers-jobs/signal",
                                                  "/var/lib/market-timers-jobs/orders"]


def test_a_long_job_name_gets_a_user_name_within_31_characters_and_distinct(write_config):
    long_a, long_b = "a" * 30 + "x", "a" * 30 + "y"
    cfg = config.load(write_config(TOP + job(long_a) + job(long_b)))
    users = [cfg.user_of(j) for j in cfg.jobs]
    assert all(len(u) <= 31 and u.startswith("market-job-") for u in users)
    assert users[0] != users[1]


def test_a_named_user_is_shared_as_before(write_config):
    cfg = config.load(write_config('user = "market-jobs"\n' + TOP + job("a")
                                   + job("b", 'user = "trader"')))
    assert [cfg.user_of(j) for j in cfg.jobs] == ["market-jobs", "trader"]
    assert cfg.home_of(cfg.jobs[0]) == "/var/lib/market-jobs"
    assert cfg.home_of(cfg.jobs[1]) is None  # a user of the admin's: its home is its own


def test_credentials_on_a_user_another_job_runs_as_are_refused(write_config):
    path, [line] = problems(write_config, 'user = "market-jobs"\n' + TOP
                            + job("orders", 'credentials = ["broker-key"]') + job("signal"))
    assert at(line, path, "job.orders.credentials: ")
    assert "market-jobs" in line and "signal" in line and "could read" in line
    assert line.endswith("(got 'broker-key')"), line


def test_credentials_on_a_job_with_a_user_of_its_own_are_kept(write_config):
    cfg = config.load(write_config(TOP + job("orders", 'credentials = ["broker-key"]')
                                   + job("b", 'user = "trader"')))
    assert cfg.job("orders").credentials == ("broker-key",)


def test_a_shared_directory_is_named_by_the_config_and_listed_by_its_jobs(write_config):
    cfg = config.load(write_config(
        TOP + '[shared]\nweights = "/srv/market/weights"\n'
        + job("signal", 'shared = ["weights"]') + job("orders", 'shared = ["weights"]')
        + job("report")))
    assert cfg.shared == {"weights": "/srv/market/weights"}
    assert cfg.job("signal").shared == ("weights",) and cfg.job("report").shared == ()
    assert cfg.shared_group("weights") == "market-share-weights"


@pytest.mark.parametrize(("text", "where", "reason", "shown"), [
    ('[shared]\nweights = "relative/dir"\n', "shared.weights:", "absolute path",
     "relative/dir"),
    ('[shared]\n"Bad Name" = "/srv/x"\n', "shared.Bad Name:", "[a-z]", None),
    ('[shared]\nweights = "/srv/x"\n' + job("a", 'shared = ["nope"]'), "job.a.shared[0]:",
     "[shared]", "nope"),
])
def test_bad_shared_directories_name_file_key_and_value(write_config, text, where, reason,
                                                        shown):
    if "[[job]]" not in text:
        text += job("a")
    path, lines = problems(write_config, TOP + text)
    [line] = [x for x in lines if where in x]
    assert at(line, path, where), line
    assert reason in line
    if shown:
        assert f"(got {shown!r})" in line, line


@pytest.mark.parametrize("where", ["user", "job"])
def test_a_job_that_runs_as_the_operator_group_is_refused(write_config, where):
    """Its members may halt, pause and resume: a job among them could lift its own halt."""
    top = 'user = "market-ops"\n' if where == "user" else ""
    mine = ['user = "market-ops"'] if where == "job" else []
    path, lines = problems(write_config, top + 'operator_group = "market-ops"\n' + TOP
                           + job("a", *mine))
    assert any("market-ops" in x and "operator" in x for x in lines), lines


def _a_supplementary_member() -> tuple[str, str] | None:
    """(user, group) of a user of this host in a group other than its primary one."""
    import grp
    import pwd

    for group in grp.getgrall():
        for user in group.gr_mem:
            try:
                if pwd.getpwnam(user).pw_gid != group.gr_gid:
                    return user, group.gr_name
            except KeyError:
                continue
    return None


@pytest.mark.parametrize("kind", ["primary", "supplementary"])
def test_a_job_whose_user_is_in_the_operator_group_is_refused_at_load(write_config, kind):
    """Issue 41 item 4: a job among the operators (its user's primary or supplementary group)
    could lift its own halt: refused at load, naming the file, the job, the user and the group.
    nobody's primary group is nogroup on Debian."""
    found = ("nobody", "nogroup") if kind == "primary" else _a_supplementary_member()
    if found is None:
        pytest.skip("no user of this host has a supplementary group")
    user, group = found
    path, lines = problems(write_config, f'operator_group = "{group}"\n' + TOP
                           + job("orders", f'user = "{user}"'))
    [line] = [x for x in lines if "operator_group" in x]
    assert at(line, path, "job.orders.user") or at(line, path, "job[0].user"), line
    assert f"'{user}'" in line and f"'{group}'" in line and kind in line, line
