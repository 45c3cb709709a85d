"""`market-timers plan --summary` summarises (issue 42, item 2): one line per job, in the day's
order, with its rule, its instants in exchange time, its next fire and its count."""

from __future__ import annotations

from market_timers import cli

CONFIG = """
calendar = "XNYS"
horizon = 10
[[job]]
name = "statement"
event = "close"
offset = "+30min"
command = ["/bin/true"]
[[job]]
name = "connect"
event = "open"
offset = "-30min"
command = ["/bin/true"]
[[job]]
name = "cycle"
every = "1min"
from = "open+5min"
until = "close-20min"
command = ["/bin/true"]
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/bin/true"]
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/bin/true"]
requires = ["signal"]
"""


def summary(write_config, capsys, *extra) -> list[str]:
    path = write_config(CONFIG)
    assert cli.main(["--config", str(path), "--now", "2025-11-26T15:00:00Z", "plan", "--summary",
                     "--from", "2025-11-24", "--to", "2025-11-28", *extra]) == 0
    return capsys.readouterr().out.splitlines()


def test_plan_summary_is_one_line_per_job_in_the_days_order(write_config, capsys):
    lines = summary(write_config, capsys)
    assert lines[0].split()[:3] == ["JOB", "CALENDAR", "RULE"]
    assert [x.split()[0] for x in lines[1:6]] == ["connect", "cycle", "signal",
                                                    "closing-orders", "statement"]
    assert all(not x.startswith(("connect", "signal")) for x in lines[6:])


def test_plan_summary_tells_the_instants_in_exchange_time_the_next_fire_and_the_count(
        write_config, capsys):
    lines = summary(write_config, capsys)
    signal = next(x for x in lines if x.startswith("signal "))
    assert "close -15min" in signal and "15:45 EST" in signal
    assert "12:45 EST on Fri 2025-11-28" in signal  # the day after Thanksgiving closes at 13:00
    assert "Wed 2025-11-26 20:45Z" in signal  # the next fire, from --now
    assert signal.rstrip().endswith(" 4")  # Mon, Tue, Wed, Fri
    cycle = next(x for x in lines if x.startswith("cycle "))
    assert "every 1min" in cycle and "09:35-15:40 EST" in cycle and "4 sessions" in cycle
    assert "Wed 2025-11-26 15:00Z" in cycle  # its next slot: at --now itself
