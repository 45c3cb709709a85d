"""Miss detection latency (container): a planned run whose timer was stopped never starts; the
deadman (`market-timers deadman`, every minute by market-deadman.timer) must alert. Latency =
alert arrival at the fake Telegram server − the miss deadline (instant + grace + timeout + slack).

Run alone: .venv/bin/python -m bench.miss_detection
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

from bench.common import Check, Section, table

NAME = "miss_detection"
NEEDS_CONTAINER = True
JOBS = 3
SPACING_S = 20  # deadlines at three phases of the deadman's minute
LEAD_S = 25
GRACE_S, TIMEOUT_S, SLACK_S = 5, 5, 5
INTERVAL_S = 60  # market-deadman.timer: OnCalendar=*-*-* *:*:30


def config_text(first_fire: float, base: str) -> str:
    from bench.fake_telegram import alerts_toml

    midnight = datetime.fromtimestamp(first_fire, UTC).replace(hour=0, minute=0, second=0)
    start = int(first_fire - midnight.timestamp())
    lines = ['calendar = "24/7"', "horizon = 1", "", "[watch]", f"slack_sec = {SLACK_S}", ""]
    for i in range(JOBS):
        h, rest = divmod(start + i * SPACING_S, 3600)
        m, sec = divmod(rest, 60)
        lines += ["[[job]]", f'name = "miss{i}"', 'event = "open"',
                  f'offset = "+{h}h{m}min{sec}s"', 'command = ["/bin/true"]',
                  f'grace = "{GRACE_S}s"', f'timeout = "{TIMEOUT_S}s"', ""]
    return "\n".join(lines) + "\n" + alerts_toml(base)


def run(box) -> Section:
    from bench.box import CONFIG, clear_market_units, now_inside
    from bench.fake_telegram import StampedFakeApi, install_token

    s = Section(NAME, "6. Miss detection latency: missed run → deadman alert (container)")
    clear_market_units(box)
    install_token(box)
    deadman = box.run(["systemctl", "is-active", "market-deadman.timer"], check=False)
    with StampedFakeApi() as api:
        first = math.ceil(now_inside(box)) + LEAD_S
        box.write_file(CONFIG, config_text(first, api.base))
        box.run(["market-timers", "sync"], timeout=120)
        # Stop the timers (a stop never fires): the runs will simply not happen.
        box.run("systemctl stop 'market-miss*@*.timer'")
        instants = {f"miss{i}": first + i * SPACING_S for i in range(JOBS)}
        deadlines = {j: t + GRACE_S + TIMEOUT_S + SLACK_S for j, t in instants.items()}
        end = max(deadlines.values()) + 2 * INTERVAL_S + 15
        arrivals: dict[str, float] = {}
        while time.time() < end and len(arrivals) < JOBS:
            for m in api.received("telegram"):
                found = re.search(r"miss\d", m["text"])
                if found and "did not run" in m["text"]:
                    arrivals.setdefault(found.group(0), m["received"])
            time.sleep(1)
        messages = api.received("telegram")
    passes = box.run(["journalctl", "-q", "--no-pager", "-o", "short-iso", "-u",
                      "market-deadman.service", f"--since=@{int(first - LEAD_S)}"],
                     check=False).stdout
    rows = []
    for job in sorted(instants):
        got = arrivals.get(job)
        rows.append([job, datetime.fromtimestamp(instants[job], UTC).strftime("%H:%M:%S"),
                     datetime.fromtimestamp(deadlines[job], UTC).strftime("%H:%M:%S"),
                     f"{got - deadlines[job]:.1f}" if got else "no alert",
                     f"{got - instants[job] - GRACE_S:.1f}" if got else "-"])
    s.add(table(["job", "instant (UTC)", "miss deadline", "alert − deadline s",
                 "alert − (instant + grace) s"], rows))
    s.add(f"Jobs with grace {GRACE_S} s, timeout {TIMEOUT_S} s, `[watch] slack_sec = {SLACK_S}`: "
          "the deadman calls a run missed once instant + grace + timeout + slack has passed, and "
          "it runs at second :30 of each minute, so the expected latency after the deadline is "
          f"0–{INTERVAL_S} s plus the pass itself. The timers were stopped right after the sync "
          f"(a stop never fires). market-deadman.timer: {deadman.stdout.strip()}. "
          f"Telegram messages received in all: {len(messages)} ("
          + "; ".join(m["text"].splitlines()[0][:90] for m in messages[:6]) + ").")
    lat = [arrivals[j] - deadlines[j] for j in arrivals]
    if len(lat) < JOBS:
        tail = "\n".join(passes.strip().splitlines()[-15:])
        s.add("Deadman journal (last lines):\n\n```\n" + tail + "\n```")
    if not lat:
        s.checks.append(Check(f"miss alert within one deadman interval ({INTERVAL_S} s)", None,
                              "no missed-run alert arrived; see the journal above"))
        return s
    s.checks.append(Check(f"miss alert within one deadman interval ({INTERVAL_S} s) of the "
                          "deadline", max(lat) <= INTERVAL_S and len(lat) == JOBS,
                          f"max {max(lat):.1f} s after the deadline ({len(lat)}/{JOBS} alerts)"))
    s.headline.append(f"miss detection: alert {min(lat):.0f}–{max(lat):.0f} s after the miss "
                      f"deadline ({len(lat)}/{JOBS})")
    s.commands += [
        "# config: calendar \"24/7\", jobs miss0..miss2 20 s apart, grace/timeout 5 s, [watch] "
        "slack_sec = 5, [alerts.telegram] api_base = http://127.0.0.1:PORT",
        "market-timers sync && systemctl stop 'market-miss*@*.timer'",
        "# wait for the 'did not run' Telegram message at the fake server (arrival stamped)",
        "journalctl -u market-deadman.service",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
