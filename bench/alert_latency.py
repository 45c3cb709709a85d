"""Alert latency (container): a job fails (its timer fires, `/bin/false` exits 1) -> the fake
Telegram server on the host's 127.0.0.1 receives the alert. 20 failures, p50/p99.

Run alone: .venv/bin/python -m bench.alert_latency
"""

from __future__ import annotations

import math
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, summary, table

NAME = "alert_latency"
NEEDS_CONTAINER = True
GOAL_S = 1.0
FAILURES = 20
SPACING_S = 3
LEAD_S = 20


def config_text(first_fire: float, base: str) -> str:
    from bench.fake_telegram import alerts_toml

    midnight = datetime.fromtimestamp(first_fire, UTC).replace(hour=0, minute=0, second=0)
    start = int(first_fire - midnight.timestamp())
    lines = ['calendar = "24/7"', "horizon = 1", ""]
    for i in range(FAILURES):
        h, rest = divmod(start + i * SPACING_S, 3600)
        m, sec = divmod(rest, 60)
        lines += ["[[job]]", f'name = "fail{i:02d}"', 'event = "open"',
                  f'offset = "+{h}h{m}min{sec}s"', 'command = ["/bin/false"]', ""]
    return "\n".join(lines) + "\n" + alerts_toml(base)


def exit_times(box) -> dict[str, float]:
    """job -> the failed service's ExecMainExitTimestamp (systemd's view of the failure)."""
    names = box.run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                     "market-fail*@*.service"], check=False).stdout.split()
    names = [n for n in names if n.endswith(".service") and n.startswith("market-fail")]
    if not names:
        return {}
    out = box.run(["systemctl", "show", "--timestamp=us+utc", "-p", "Id,ExecMainExitTimestamp",
                   *names], check=False).stdout
    result = {}
    for block in out.split("\n\n"):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        try:
            t = datetime.strptime(kv.get("ExecMainExitTimestamp", ""),
                                  "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC)
        except ValueError:
            continue
        job = kv["Id"].removeprefix("market-").split("@", 1)[0]
        result[job] = t.timestamp()
    return result


def run(box) -> Section:
    from bench.box import CONFIG, clear_market_units, now_inside
    from bench.fake_telegram import StampedFakeApi, install_token

    s = Section(NAME, "5. Alert latency: job failure → Telegram message (container → host "
                      "loopback)")
    clear_market_units(box)
    install_token(box)
    with StampedFakeApi() as api:
        first = math.ceil(now_inside(box)) + LEAD_S
        box.write_file(CONFIG, config_text(first, api.base))
        box.run(["market-timers", "sync"], timeout=120)
        last = first + (FAILURES - 1) * SPACING_S
        deadline = last + 60
        while time.time() < deadline:
            got = {m for m in re.findall(r"fail\d\d", " ".join(
                x["text"] for x in api.received("telegram")))}
            if len(got) >= FAILURES and time.time() > last + 2:
                break
            time.sleep(1)
        time.sleep(2)
        messages = api.received("telegram")
    exits = exit_times(box)
    first_arrival: dict[str, float] = {}
    for m in messages:
        found = re.search(r"fail\d\d", m["text"])
        if found:
            first_arrival.setdefault(found.group(0), m["received"])
    lat = [first_arrival[j] - exits[j] for j in sorted(first_arrival) if j in exits]
    sample = messages[0]["text"] if messages else "(none)"
    if not lat:
        s.checks.append(Check(f"alert p99 ≤ {GOAL_S} s", None,
                              f"no alert matched a failed run: {len(messages)} message(s) "
                              f"received, {len(exits)} failed service(s) seen"))
        s.add(box.run("journalctl -q --no-pager -u 'market-alert-failure@*' -n 30",
                      check=False).stdout.replace("\n", "  \n"))
        return s
    st = summary(lat)
    s.add(table(["failures", "alerts received", "messages in all", "p50 s", "p95 s", "p99 s",
                 "max s", "min s"],
                [[FAILURES, len(lat), len(messages), st["p50"], st["p95"], st["p99"], st["max"],
                  st["min"]]]))
    s.add("Latency = the host's clock when the fake server recorded the `sendMessage` − systemd's "
          "`ExecMainExitTimestamp` of the failed job service (the container shares the host's "
          "clock). Path: `OnFailure=market-alert-failure@%n.service` → `market-timers "
          "alert-handler failure` → outbox → Telegram channel → 127.0.0.1. Failures 3 s apart, "
          "each its own job (no dedup folding). First message text: "
          f"`{sample.splitlines()[0][:160] if sample else ''}`")
    s.checks.append(Check(f"alert latency p99 ≤ {GOAL_S:.0f} s", st["p99"] <= GOAL_S
                          and len(lat) == FAILURES,
                          f"p50 {st['p50']:.2f} s, p99 {st['p99']:.2f} s ({len(lat)}/{FAILURES} "
                          "alerts)"))
    s.headline.append(f"alert latency: p50 {st['p50']:.2f} s, p99 {st['p99']:.2f} s over "
                      f"{len(lat)} failures")
    s.commands += [
        "python -m tests.fakes.http_api equivalent in-process: bench/fake_telegram.py "
        "(FakeApi on 127.0.0.1, arrival stamped)",
        "# config: calendar \"24/7\", 20 jobs fail00..fail19 running /bin/false 3 s apart; "
        "[alerts] repeat_minutes = 0, [alerts.telegram] chat_id = \"1\", api_base = "
        "\"http://127.0.0.1:PORT\"; /etc/credstore/market-timers.telegram-token",
        "market-timers sync",
        "systemctl show --timestamp=us+utc -p Id,ExecMainExitTimestamp market-fail*@*.service",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
