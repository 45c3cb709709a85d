"""`market-timers alerts`: the open incidents, each with its id, severity, job and session, age,
and the exact command that acknowledges it (issue 45, item 6: no command listed them)."""

from __future__ import annotations

import json

from market_timers.alerts.api import raise_alert, record_success
from market_timers.alerts.commands import ack, alerts_list

TODAY = "2026-11-30"


def test_the_open_incidents_are_listed_with_the_command_that_acks_each(make_ctx, clock, capsys):
    ctx = make_ctx(repeat_minutes=15)
    orders = raise_alert(ctx, kind="failed", job="orders", session=TODAY)
    report = raise_alert(ctx, kind="failed", job="report", session=TODAY, job_severity="warning")
    halt = raise_alert(ctx, kind="halt", key="halt:orders::2026-11-30T14:31:05Z:",
                       severity="critical", title="HALT: order jobs halted by ops",
                       every_channel=True)
    clock.advance(minutes=12)
    assert alerts_list(ctx) == 0
    out = capsys.readouterr().out
    print(out)
    for alert, severity, what in ((orders, "critical", f"orders {TODAY}"),
                                  (report, "warning", f"report {TODAY}"),
                                  (halt, "critical", "HALT: order jobs")):
        [line] = [x for x in out.splitlines() if alert.id in x]
        assert severity in line and what in line and "12 min" in line
        assert line.rstrip().endswith(f"market-timers ack {alert.id}")
    record_success(ctx, job="orders", session=TODAY)
    assert ack(ctx, report.id) == 0
    capsys.readouterr()
    alerts_list(ctx, as_json=True)
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [report.id, halt.id] or \
        sorted(r["id"] for r in rows) == sorted([report.id, halt.id])
    [acked] = [r for r in rows if r["id"] == report.id]
    assert acked["acknowledged"] and acked["ack"] is None


def test_nothing_open_says_so(make_ctx, capsys):
    assert alerts_list(make_ctx()) == 0
    assert capsys.readouterr().out.startswith("no open incident")


def test_the_command_line_lists_them(write_config, capsys):
    from market_timers import cli

    path = write_config('calendar = "XNYS"\n[[job]]\nname = "j"\nevent = "close"\n'
                        'command = ["/usr/bin/true"]\n')
    assert cli.main(["--config", str(path), "alerts"]) == 0
    assert "no open incident" in capsys.readouterr().out
