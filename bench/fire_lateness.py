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


def collect(box, prefix: str, since: float, want: int, deadline: float
            ) -> dict[str, tuple[float, float]]:
    """job -> (lateness s, the job's stamp) from the BENCHSTAMP lines in the journal."""
    found: dict[str, tuple[float, float]] = {}
    while True:
        out = box.run(["journalctl", "--no-pager", "-q", "-o", "cat", f"--since=@{int(since)}"],
                      check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "BENCHSTAMP" and parts[1].startswith(prefix):
                sched = datetime.strptime(parts[2], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
                stamp = float(parts[3])
                found.setdefault(parts[1], (stamp - sched.timestamp(), stamp))
        if len(found) >= want or time.time() > deadline:
            return found
        time.sleep(2)


def _ts(text: str) -> float | None:
    for fmt in ("%a %Y-%m-%d %H:%M:%S.%f UTC", "%a %Y-%m-%d %H:%M:%S UTC"):
        try:  # "Mon 2026-11-30 07:25:42.123456 UTC"
            return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            pass
    return None


def main_starts(box, prefix: str) -> dict[str, dict[str, str]]:
    """job -> systemctl show of its timer and service (ExecMainStartTimestamp in us, state)."""
    listed = box.run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                      f"market-{prefix}*"], check=False).stdout.split()
    units = [u for u in listed if u.startswith(f"market-{prefix}") and "@" in u
             and u.endswith((".timer", ".service"))]
    if not units:
        return {}
    out = box.run(["systemctl", "show", "--timestamp=us+utc", "-p",
                   "Id,ExecMainStartTimestamp,ActiveState,SubState,Result,ExecMainStatus,"
                   "LastTriggerUSec", *units], check=False).stdout
    result: dict[str, dict[str, str]] = {}
    for block in out.split("\n\n"):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" in kv:
            job = kv["Id"].removeprefix("market-").split("@", 1)[0]
            kind = "timer" if kv["Id"].endswith(".timer") else "service"
            result.setdefault(job, {}).update({f"{kind}.{k}": v for k, v in kv.items()})
    return result


def one_round(box, prefix: str, default_accuracy: bool) -> tuple[dict, dict, str, float]:
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
    return found, main_starts(box, prefix), how, first


def run(box) -> Section:
    s = Section(NAME, "1. Fire lateness (container, systemd 252)")
    setup(box)
    version = box.run(["systemctl", "--version"]).stdout.splitlines()[0]
    rows, results = [], {}
    for label, prefix, default in (("AccuracySec=1us (as rendered)", "lat", False),
                                   ("AccuracySec= default (1 min)", "acc", True)):
        found, shown, how, first = one_round(box, prefix, default)
        lat = sorted(late for late, _ in found.values())
        results[label] = lat
        missing = [f"{prefix}{i:02d}" for i in range(TIMERS) if f"{prefix}{i:02d}" not in found]
        for job in missing:
            info = shown.get(job, {})
            s.add(f"{label}: no stamp from {job}: timer "
                  f"{info.get('timer.ActiveState')}/{info.get('timer.SubState')} last trigger "
                  f"{info.get('timer.LastTriggerUSec')}; service "
                  f"{info.get('service.ActiveState')}/{info.get('service.SubState')} result "
                  f"{info.get('service.Result')} status {info.get('service.ExecMainStatus')}; "
                  "journal: `" + box.run(["journalctl", "-q", "--no-pager", "-o", "cat",
                                          f"SYSLOG_IDENTIFIER=market-{job}"],
                                         check=False).stdout.strip()[-300:] + "`")
        if not lat:
            rows.append([label, 0, "-", "-", "-", "-", "-", "-", how])
            continue
        st = summary([x * 1000 for x in lat])
        pre, post = [], []
        for job, (late, stamp) in found.items():
            start = _ts(shown.get(job, {}).get("service.ExecMainStartTimestamp", ""))
            if start is not None:
                instant = stamp - late
                pre.append((start - instant) * 1000)
                post.append((stamp - start) * 1000)
        trig = summary(pre) if pre else None
        spawn = summary(post) if post else None
        rows.append([label, f"{st['n']}/{TIMERS}", st["p50"], st["p95"], st["p99"], st["max"],
                     f"{trig['p50']:.1f} / {trig['max']:.1f}" if trig else "-",
                     f"{spawn['p50']:.1f} / {spawn['max']:.1f}" if spawn else "-", how])
    s.add(table(["timers", "fired", "p50 ms", "p95 ms", "p99 ms", "max ms",
                 "instant → main PID start p50/max ms", "main PID start → job stamp p50/max ms",
                 "units installed by"], rows))
    s.add(f"{version}. Lateness = the job's first `time.time()` (a `/usr/bin/python3` script "
          "exec'd by `market-timers-run`, so both Python starts are included) − the scheduled "
          "whole-second instant of its `OnCalendar=`. The split columns use the service's "
          "`ExecMainStartTimestamp` (µs): instant → main PID start is systemd's part (timer "
          "wake-up, fork, sandbox set-up); main PID start → stamp is the runner's Python start, "
          "its run record and exec, then the job's own Python start. The container shares the host's clock.")
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
        "systemctl show --timestamp=us+utc -p Id,ExecMainStartTimestamp market-lat*@*.service",
        "market-timers --config B render --out /var/tmp/bench-acc && sed -i '/^AccuracySec=/d' "
        "/var/tmp/bench-acc/*.timer && cp ... /etc/systemd/system && systemctl start ...",
    ]
    return s


def setup(box) -> None:
    box.write_file(STAMP, STAMP_SCRIPT, 0o755)


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
