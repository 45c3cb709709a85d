"""Events from the trading system on a booted Debian 12 (issue 13): a gateway running as its own
user in the market-timers group calls `market-timers event`, a job calls jobnotify.event, and
market-events.path/.service route them to the fake Telegram and Slack.

1. Live, with a short `interrupt_after` (4 s): a rejection reaches Telegram at once; a long cut
   reaches Slack when the threshold passes, while the connection is still down, then its
   recovery; a short cut and a cancellation send nothing; the disconnect job's own event is
   expected.
2. The seed's four months (158 events) sent through `market-timers --now AT event` calls (the
   injected clock), then routed by the real service: 7 alerts and their 5 recoveries.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest

from .scenario import Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

LEAD = 6
GATEWAY = "tradingd"
SPOOL = "/var/spool/market-timers/events"
EVENT_JOB = "/usr/local/lib/e2e-jobs/event-job"
EVENT_JOB_SCRIPT = """#!/opt/venvs/market-timers/bin/python3
import sys
from market_timers.jobnotify import event
print("e2e-event-job spooled:", event(sys.argv[1], key=sys.argv[2]), flush=True)
"""


def rules(interrupt_after: str, within: str = "10min") -> str:
    return f"""
[events]
severity = {{ rejected = "critical", cancelled = "digest" }}

[[events.expected]]
kind = "disconnected"
after_job = "disconnect"
within = "{within}"

[[events.incident]]
name = "connection"
open = ["heartbeat_lost", "disconnected"]
close = ["reconnected"]
interrupt_after = "{interrupt_after}"
severity = "warning"
"""


def as_gateway(scenario: Scenario, *args: str, now: str | None = None) -> str:
    """`market-timers event ...` run by the gateway's own user (in market-timers-spool)."""
    cmd = ["runuser", "-u", GATEWAY, "--", "market-timers"]
    cmd += ["--now", now] if now else []
    return scenario.box.run([*cmd, "event", *args], timeout=60).stderr


@pytest.fixture
def gateway(scenario: Scenario) -> Scenario:
    box = scenario.box
    if box.run(["id", GATEWAY], check=False).returncode != 0:
        box.run(["useradd", "--system", "--no-create-home", "-G", "market-timers-spool", GATEWAY])
    box.write_file(EVENT_JOB, EVENT_JOB_SCRIPT, mode=0o755)
    return scenario


def test_the_spool_is_setgid_and_group_writable(container) -> None:
    out = container.run(["stat", "-c", "%a %U %G", SPOOL, "/run/market-timers/events"]).stdout
    assert out.split("\n")[:2] == ["3770 market-timers market-timers-spool"] * 2
    assert container.show("market-events.path", "ActiveState") == "active"
    assert container.show("market-events.timer", "ActiveState") == "active"


def test_live_events_from_a_gateway_and_a_job_reach_the_right_channel_at_the_right_time(
    gateway: Scenario,
) -> None:
    s = gateway
    disconnect = Job("disconnect", instant_in(LEAD), [])
    job = ("[[job]]\nname = \"disconnect\"\nevent = \"open\"\n"
           f"offset = \"+{disconnect.offset}s\"\n"
           f"command = [\"{EVENT_JOB}\", \"disconnected\", \"real\"]\n")
    # 10 s: the short cut below is two CLI starts and a second, 5-7 s on a busy host
    s.write_config([], extra=rules("10s", within="2s") + "\n" + job)
    assert f"start {disconnect.timer}" in s.sync()

    # The disconnect job's own `disconnected` (jobnotify.event inside the job's sandbox): expected.
    assert s.wait_finished(disconnect, LEAD + 20)["result"] == "success"
    assert "e2e-event-job spooled: True" in s.journal_of(disconnect)
    time.sleep(2.5)  # the gateway's own events below are past the job's 2 s expected window

    # A rejection: critical, Telegram, at once.
    sent = time.monotonic()
    as_gateway(s, "rejected", "--key", "R00007", "--text", "insufficient buying power")
    msg = s.wait_message("telegram", "rejected R00007", timeout=15)["text"]
    print(f"[e2e] rejection -> Telegram in {time.monotonic() - sent:.2f} s")
    assert msg.startswith("[CRITICAL] rejected R00007: insufficient buying power")

    # A short cut (1 s) and a cancellation: nothing is sent.
    as_gateway(s, "heartbeat_lost", "--key", "paper")
    as_gateway(s, "disconnected", "--key", "paper")
    time.sleep(1)
    as_gateway(s, "reconnected", "--key", "paper")
    as_gateway(s, "cancelled", "--key", "P00001", "--text", "limit order cancelled after 7 min")

    # A long cut: Slack hears of it when 10 s have passed, while it is still down...
    opened = time.monotonic()
    as_gateway(s, "heartbeat_lost", "--key", "real")
    as_gateway(s, "disconnected", "--key", "real", "--text", "closed by the broker")
    s.wait_message("slack", "connection real: not resolved", timeout=30)
    waited = time.monotonic() - opened
    print(f"[e2e] long cut -> Slack {waited:.2f} s after it opened (interrupt_after 10 s)")
    assert waited >= 9.5, f"told {waited:.2f} s after the cut opened, before interrupt_after"
    open_now = s.box.run(["market-timers", "incidents", "--json"]).stdout
    assert '"key": "real"' in open_now and '"alerted": true' in open_now
    # ...and of its end.
    as_gateway(s, "reconnected", "--key", "real")
    s.wait_message("slack", "connection real resolved after", timeout=15)

    time.sleep(2)
    assert len(s.messages("slack")) == 2 and len(s.messages("telegram")) == 1
    # Neither the short cut (paper) nor the disconnect job's own event sent anything.
    assert s.messages("slack", "paper") == [] and s.messages("slack", "expected") == []
    session = disconnect.session.isoformat()
    digest = s.box.run(["market-timers", "digest", "--session", session]).stdout
    print(digest)
    assert "connection paper: opened" in digest and "not interrupting (digest only)" in digest
    assert "disconnected real: expected after disconnect (scheduled)" in digest
    assert "cancelled P00001: limit order cancelled after 7 min" in digest
    assert s.box.run(["market-timers", "incidents"]).stdout.strip() == "no open incident"
    assert s.box.run(["ls", "-A", SPOOL]).stdout.strip() == ""
    # A burst of 40 events is routed without tripping a start limit (path unit and service).
    s.box.run("for i in $(seq 40); do runuser -u tradingd -- market-timers event cancelled "
              "--key B$i & done; wait", timeout=120)
    s.box.wait_for(lambda: s.box.run(["ls", "-A", SPOOL]).stdout.strip() == "", 60,
                   "the burst to be routed", interval=0.5)
    assert s.box.show("market-events.path", "ActiveState") == "active"
    assert s.box.show("market-events.service", "Result") == "success"


def seed_stream() -> list[dict]:
    repo = Path(__file__).resolve().parents[2]
    for p in (str(repo), str(repo / "generator")):
        if p not in sys.path:
            sys.path.insert(0, p)
    import tomllib

    from tests.events.seed_stream import END, START, build

    from market_timers.config import loader as config
    from market_timers.schedule import plan
    from market_timers.schema.problems import Problems

    raw = tomllib.loads((repo / "scripts/examples/market-timers.example.toml").read_text())
    return build(plan.plan_between(config.parse(raw, Problems()), START, END))


def test_the_seeds_four_months_through_market_timers_event_give_7_alerts(
    gateway: Scenario,
) -> None:
    s = gateway
    s.write_config([], extra=rules("60s") + '\n[[job]]\nname = "disconnect"\nevent = "close"\n'
                   'command = ["/bin/true"]\nenabled = false\n')
    stream = seed_stream()
    assert len(stream) == 158
    lines = []
    for e in stream:
        job = ["--job", "disconnect"] if "end of session" in e["text"] else []
        args = ["runuser", "-u", GATEWAY, "--", "market-timers", "--now", e["at"], "event",
                e["kind"], "--key", e["key"], "--text", e["text"], *job]
        lines.append(shlex.join(args))
    # The clock is the events' own (2025): no pass may run until the whole stream is spooled.
    s.box.systemctl("stop", "market-events.path", "market-events.timer", "market-events.service")
    try:
        started = time.monotonic()
        s.box.run("set -e\n" + "\n".join(lines), timeout=600)
        print(f"[e2e] 158 `market-timers event` calls in {time.monotonic() - started:.1f} s")
        assert len(s.box.run(["ls", SPOOL]).stdout.split()) == 158
    finally:
        s.box.systemctl("start", "market-events.path", "market-events.timer")
    s.box.wait_for(lambda: len(s.messages("slack")) + len(s.messages("telegram")) >= 12, 120,
                   "12 messages at the fakes", interval=0.5)
    time.sleep(3)
    telegram = [m["text"].splitlines()[0] for m in s.messages("telegram")]
    slack = [m["text"].splitlines()[0] for m in s.messages("slack")]
    print("\n".join(telegram + slack))
    assert telegram == ["[CRITICAL] rejected P00005: paper: insufficient buying power",
                        "[CRITICAL] rejected R00007: real: insufficient buying power"]
    assert slack.count("[WARNING] connection real: not resolved after 60 s (heartbeat_lost, "
                       "disconnected)") == 5
    assert sorted(t for t in slack if t.startswith("[RESOLVED] connection real resolved")) == sorted(
        f"[RESOLVED] connection real resolved after {d} s" for d in (92, 137, 72, 117, 107))
    assert len(slack) == 10
    assert s.box.run(["ls", "-A", SPOOL]).stdout.strip() == ""
