"""`[cluster]`: its keys, their errors (file, key, value; exit 2) and what the units receive."""

from __future__ import annotations

import datetime as dt
import socket

import pytest

from market_timers.config import loader as config
from market_timers.schedule import plan, render
from market_timers.schema.problems import ConfigError

JOB = """
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
grace = "30s"
"""


def load(write_config, cluster: str):
    return config.load(write_config('calendar = "XNYS"\n' + JOB + "\n[cluster]\n" + cluster))


def problems(write_config, cluster: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(write_config, cluster)
    return exc.value.problems.lines()


@pytest.mark.parametrize("value, seconds", [('"2s"', 2), ('"0s"', 0), ("0", 0), ('"29s"', 29)])
def test_standby_delay(write_config, value, seconds):
    cfg = load(write_config, f'node = "ny4-b"\nstandby_delay = {value}\n')
    assert (cfg.cluster.node, cfg.cluster.standby_delay, cfg.cluster.on_db_unreachable) == (
        "ny4-b", seconds, "skip")


def test_defaults_node_is_the_hostname(write_config):
    cfg = load(write_config, "")
    assert (cfg.cluster.node, cfg.cluster.standby_delay) == (socket.gethostname(), 0)


@pytest.mark.parametrize("cluster, key, value", [
    ('standby_delay = "30s"\n', "cluster.standby_delay", "30s"),  # not less than the grace
    ('standby_delay = "soon"\n', "cluster.standby_delay", "soon"),
    ('standby_delay = "-2s"\n', "cluster.standby_delay", "-2s"),
    ('on_db_unreachable = "maybe"\n', "cluster.on_db_unreachable", "maybe"),
    ('node = "ny4 a"\n', "cluster.node", "ny4 a"),
    ('max_clock_skew_ms = 0\n', "cluster.max_clock_skew_ms", "0"),
    ('max_clock_skew_ms = -5\n', "cluster.max_clock_skew_ms", "-5"),
    ('max_clock_skew_ms = 90000\n', "cluster.max_clock_skew_ms", "90000"),
    ('max_clock_skew_ms = "1s"\n', "cluster.max_clock_skew_ms", "1s"),
    ('max_clock_skew_ms = 2.5\n', "cluster.max_clock_skew_ms", "2.5"),
])
def test_bad_values_name_file_key_and_value(write_config, cluster, key, value):
    (line,) = problems(write_config, cluster)
    assert f": {key}: " in line and value in line, line


def test_max_clock_skew_ms_defaults_to_a_second_and_reaches_the_units(write_config):
    assert load(write_config, "").cluster.max_clock_skew_ms == 1000
    cfg = load(write_config, 'node = "ny4-b"\nmax_clock_skew_ms = 250\n')
    assert cfg.cluster.max_clock_skew_ms == 250
    day = dt.date(2025, 11, 26)
    (service,) = [u for u in render.render_all(cfg, plan.plan_between(cfg, day, day))
                  if u.name.endswith(".service")]
    assert "Environment=MARKET_MAX_CLOCK_SKEW_MS=250" in service.text.splitlines()


def test_the_dsn_is_a_credential_never_a_config_key(write_config):
    (line,) = problems(write_config, 'dsn = "host=db password=x"\n')
    assert ": cluster.dsn: " in line and "credential market-timers.cluster-dsn" in line
    assert "password" not in line  # a secret is never echoed


def test_job_units_get_the_cluster_environment_and_the_dsn_credential(write_config):
    cfg = load(write_config, 'node = "ny4-b"\nstandby_delay = "2s"\non_db_unreachable = "run"\n')
    day = dt.date(2025, 11, 26)
    (service,) = [u for u in render.render_all(cfg, plan.plan_between(cfg, day, day))
                  if u.name.endswith(".service")]
    for line in ("Environment=MARKET_LEDGER=postgresql", "Environment=MARKET_NODE=ny4-b",
                 "Environment=MARKET_STANDBY_DELAY_SEC=2",
                 "Environment=MARKET_ON_DB_UNREACHABLE=run",
                 "LoadCredential=market-timers.cluster-dsn"):
        assert line in service.text.splitlines(), service.text


def test_without_cluster_no_ledger_environment(write_config):
    cfg = config.load(write_config('calendar = "XNYS"\n' + JOB))
    day = dt.date(2025, 11, 26)
    text = "".join(u.text for u in render.render_all(cfg, plan.plan_between(cfg, day, day)))
    assert "MARKET_LEDGER" not in text and "cluster-dsn" not in text


def test_the_deadman_loads_the_dsn_credential_in_cluster_mode_only(write_config):
    from market_timers.schedule import credunits

    cfg = load(write_config, 'node = "ny4-a"\n')
    assert "market-timers.cluster-dsn" in credunits.needed(cfg)[credunits.DEADMAN]
    assert "LoadCredential=market-timers.cluster-dsn\n" in credunits.render(cfg)[credunits.DEADMAN]
    local = config.load(write_config('calendar = "XNYS"\n' + JOB))
    assert "market-timers.cluster-dsn" not in credunits.needed(local)[credunits.DEADMAN]


def test_a_periodic_job_in_a_cluster_takes_its_lock_group_through_the_cluster_ledger(
        write_config):
    """Issue 23 item 4: a periodic job's units carry the cluster ledger and the DSN credential
    like a single job's, so its runner takes the lock group cluster-wide (the runner's side:
    test_cluster_runner.py, test_a_periodic_slot_honours_the_cluster_wide_lock_group)."""
    cfg = config.load(write_config(
        'calendar = "XNYS"\n' + JOB + 'lock = "orders"\n[[job]]\nname = "cycle"\n'
        'every = "5min"\nfrom = "open+5min"\nuntil = "close"\ncommand = ["/usr/bin/true"]\n'
        'lock = "orders"\n\n[cluster]\nnode = "ny4-a"\n'))
    day = dt.date(2025, 11, 26)
    services = [u for u in render.render_all(cfg, plan.plan_between(cfg, day, day))
                if u.name.endswith(".service") and "cycle" in u.name]
    assert services
    for service in services:
        lines = service.text.splitlines()
        for line in ("Environment=MARKET_LEDGER=postgresql", "Environment=MARKET_LOCK_GROUP=orders",
                     "LoadCredential=market-timers.cluster-dsn"):
            assert line in lines, service.text
