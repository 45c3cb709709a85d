"""Fire lateness (container, systemd 252): 30 timers rendered by market-timers itself, 2 s apart;
lateness = the job's own first time.time() stamp - the scheduled instant. Then the same timers
with systemd's default AccuracySec= (1 min: the rendered timers with that line removed).

Run alone: .venv/bin/python -m bench.fire_lateness
"""

from __future__ import annotations

import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, summary, table

NAME = "fire_lateness"
NEEDS_CONTAINER = True
GOAL_MS = 50.0
TIMERS = 30
SPACING_S = 2
LEAD_S = 20  # first fire this long after "now": time for `market-timers sync` inside
STAMP = "/usr/local/bin/bench-stamp"
STAMP_SCRIPT = """#!/usr/bin/python3
import time
t = time.time()
import os
print("BENCHSTAMP", os.environ.get("MARKET_JOB"), os.environ.get("MARKET_SCHEDULED_UTC"),
      "%.6f" % t, flush=True)
"""


def config_text(prefix: str, first_fire: float) -> str:
    """A 24/7-calendar config whose jobs fire at first_fire + i*SPACING_S (offsets from the open
    of today's session, 00:00 UTC)."""
    midnight = datetime.fromtimestamp(first_fire, UTC).replace(hour=0, minute=0, second=0)
    base = int(first_fire - midnight.timestamp())
    lines = ['calendar = "24/7"', "horizon = 1", ""]
    for i in range(TIMERS):
        off = base + i * SPACING_S
        h, rest = divmod(off, 3600)
        m, sec = divmod(rest, 60)
        lines += ["[[job]]", f'name = "{prefix}{i:02d}"', 'event = "open"',
                  f'offset = "+{h}h{m}min{sec}s"', f'command = ["{STAMP}"]', 'timeout = "30s"',
                  ""]
    return "\n".join(lines)


def collect(box, prefix: str, since: float, want: int, deadline: float) -> dict[str, float]:
    """job -> lateness (s) from the BENCHSTAMP lines in the journal."""
    found: dict[str, float] = {}
    while True:
        out = box.run(["journalctl", "--no-pager", "-q", "-o", "cat", f"--since=@{int(since)}"],
                      check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "BENCHSTAMP" and parts[1].startswith(prefix):
                sched = datetime.strptime(parts[2], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
                found.setdefault(parts[1], float(parts[3]) - sched.timestamp())
        if len(found) >= want or time.time() > deadline:
            return found
        time.sleep(2)


def trigger_split(box, prefix: str) -> list[tuple[float, float]]:
    """(timer trigger - instant, service main start - trigger) per timer, from systemd itself."""
    names = [f"market-{prefix}{i:02d}@*" for i in range(TIMERS)]
    out = box.run(["systemctl", "show", "--timestamp=unix", "-p", "Id,LastTriggerUSec,"
                   "ExecMainStartTimestamp,Environment", *names], check=False).stdout
    # systemctl show with globs only shows loaded units; fall back gracefully.
    rows = []
    timers = box.run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                      f"market-{prefix}*.timer"], check=False).stdout.split()
    timers = [t for t in timers if t.endswith(".timer")]
    if not timers:
        return rows
    services = [t.removesuffix(".timer") + ".service" for t in timers]
    out = box.run(["systemctl", "show", "--timestamp=us+utc", "-p",
                   "Id,LastTriggerUSec,ExecMainStartTimestamp", *timers, *services],
                  check=False).stdout
    props: dict[str, dict[str, str]] = {}
    for block in out.split("\n\n"):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" in kv:
            props[kv["Id"]] = kv

    def ts(text: str) -> float | None:
        try:  # "Mon 2026-11-30 07:25:42.123456 UTC"
            return datetime.strptime(text, "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(
                tzinfo=UTC).timestamp()
        except ValueError:
            return None

    for timer, service in zip(timers, services, strict=True):
        hhmmss = timer.removesuffix(".timer")[-6:]
        day = timer.split("@", 1)[1][:10]
        instant = datetime.strptime(f"{day} {hhmmss}", "%Y-%m-%d %H%M%S").replace(
            tzinfo=UTC).timestamp()
        trig = ts(props.get(timer, {}).get("LastTriggerUSec", ""))
        start = ts(props.get(service, {}).get("ExecMainStartTimestamp", ""))
        if trig is not None and start is not None:
            rows.append((trig - instant, start - trig))
    return rows


def one_round(box, prefix: str, default_accuracy: bool) -> tuple[list[float], list, str]:
    from bench.box import CONFIG, UNIT_DIR, clear_market_units, now_inside

    clear_market_units(box)
    first = math.ceil(now_inside(box)) + LEAD_S
    if not default_accuracy:
        box.write_file(CONFIG, config_text(prefix, first))
        box.run(["market-timers", "sync"], timeout=120)
        how = "market-timers sync"
    else:
        cfg = "/var/tmp/bench-default-accuracy.toml"
        box.write_file(cfg, config_text(prefix, first))
        box.run(["rm", "-rf", "/var/tmp/bench-acc"])
        box.run(["market-timers", "--config", cfg, "render", "--out", "/var/tmp/bench-acc"],
                timeout=120)
        box.run("sed -i '/^AccuracySec=/d' /var/tmp/bench-acc/*.timer && "
                f"cp /var/tmp/bench-acc/market-* {UNIT_DIR}/ && "
                "systemctl start $(cd /var/tmp/bench-acc && ls *.timer)")
        how = "render + AccuracySec= line deleted + systemctl start"
    if now_inside(box) > first - 2:
        raise RuntimeError(f"setup ({how}) took longer than the {LEAD_S} s lead")
    last = first + (TIMERS - 1) * SPACING_S
    wait = last + (62 if default_accuracy else 3) - time.time()
    time.sleep(max(wait, 0))
    found = collect(box, prefix, first - LEAD_S - 5, TIMERS, time.time() + 30)
    return sorted(found.values()), trigger_split(box, prefix), how


def run(box) -> Section:
    s = Section(NAME, "1. Fire lateness (container, systemd 252)")
    setup(box)
    version = box.run(["systemctl", "--version"]).stdout.splitlines()[0]
    rows, results = [], {}
    for label, prefix, default in (("AccuracySec=1us (as rendered)", "lat", False),
                                   ("AccuracySec= default (1 min)", "acc", True)):
        lat, split, how = one_round(box, prefix, default)
        results[label] = lat
        if not lat:
            rows.append([label, 0, "-", "-", "-", "-", "-", how])
            continue
        st = summary([x * 1000 for x in lat])
        trig = summary([a * 1000 for a, _ in split]) if split else None
        spawn = summary([b * 1000 for _, b in split]) if split else None
        rows.append([label, f"{st['n']}/{TIMERS}", st["p50"], st["p95"], st["p99"], st["max"],
                     f"{trig['p50']:.1f} / {trig['max']:.1f}" if trig else "-",
                     f"{spawn['p50']:.1f} / {spawn['max']:.1f}" if spawn else "-", how])
    s.add(table(["timers", "fired", "p50 ms", "p95 ms", "p99 ms", "max ms",
                 "systemd trigger − instant p50/max ms", "main PID start − trigger p50/max ms",
                 "units installed by"], rows))
    s.add(f"{version}. Lateness = the job's first `time.time()` (a `/usr/bin/python3` script "
          "exec'd by `market-timers-run`, so both Python starts are included) − the scheduled "
          "whole-second instant of its `OnCalendar=`. The split columns come from systemd's own "
          "`LastTriggerUSec` and the service's `ExecMainStartTimestamp`; the rest of the "
          "lateness (main PID start → first stamp) is the runner's and the job's Python start "
          "plus the run record. The container shares the host's clock.")
    tight = results.get("AccuracySec=1us (as rendered)") or []
    if tight:
        st = summary([x * 1000 for x in tight])
        s.checks.append(Check(f"p99 lateness ≤ {GOAL_MS:.0f} ms with AccuracySec=1us",
                              st["p99"] <= GOAL_MS and len(tight) == TIMERS,
                              f"p50 {st['p50']:.1f} ms, p99 {st['p99']:.1f} ms, max "
                              f"{st['max']:.1f} ms ({len(tight)}/{TIMERS} fired)"))
        loose = results.get("AccuracySec= default (1 min)") or []
        s.headline.append(f"fire lateness (1us): p50 {st['p50']:.0f} ms, p99 {st['p99']:.0f} ms"
                          + (f"; default AccuracySec: p50 {summary(loose)['p50']:.1f} s, max "
                             f"{max(loose):.1f} s" if loose else ""))
    else:
        s.checks.append(Check("fire lateness", None, "no job stamp was found in the journal"))
    s.commands += [
        "# config: calendar \"24/7\", horizon 1, 30 jobs lat00..lat29, event \"open\", offsets "
        f"so fires land {LEAD_S} s + i*{SPACING_S} s from now; command [\"{STAMP}\"] "
        "(bench/fire_lateness.py:config_text)",
        "market-timers sync     # inside the container",
        "journalctl -o cat --since=@START | grep BENCHSTAMP",
        "systemctl show --timestamp=us+utc -p Id,LastTriggerUSec,ExecMainStartTimestamp "
        "market-lat*.timer market-lat*.service",
        "market-timers --config B render --out /var/tmp/bench-acc && sed -i '/^AccuracySec=/d' "
        "/var/tmp/bench-acc/*.timer && cp ... /etc/systemd/system && systemctl start ...",
    ]
    return s


def setup(box) -> None:
    box.write_file(STAMP, STAMP_SCRIPT, 0o755)


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
