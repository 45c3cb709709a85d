"""The alternatives side by side (issue 15, section 1): instant -> stamp lateness of Debian's cron,
a hand-written systemd timer + service (AccuracySec=1us, no runner), an in-process APScheduler
job, and market-timers, in the same run, the same container, on the same stamp program.

The stamp is bench/stamp.c, built static on the host: its first action reads CLOCK_REALTIME, so
no approach pays an interpreter start for it (market-timers still pays its runner's). Three more
rows are market-timers itself: without its pre-fire (`lead = "0s"`, as before issue 15), a plain
Python job (its first line, /usr/bin/python3) and a warm Python job (`warm = "10s"`: exec'd 10 s
early, it blocks in jobnotify.wait_for_instant(); the stamp is the moment it returns, when the
job would act). The fires of the sub-second approaches are interleaved (round robin, 2 s apart,
at seconds 6-54 of each minute, so they stay clear of cron's minute), and cron gets a crontab line
for every whole minute of the same window: it can only fire once a minute, so it has fewer fires.

Per-fire attribution (issue 28), for the market-timers row and the plain systemd timer's: each
stamp records its scheduling policy and getrusage(), and for market-timers what exec-at exported
(when its wait ended, its process's counters before the exec); a sampler in the container reads the
host's steal just before and after each of their instants; PID 1's journal gives every unit it
started or stopped within ±200 ms of an instant; the plain units' ExecMainStartTimestamp, when
systemd forked their process. Every fire later than LATE_MS is tabled with all of it.

Run alone: .venv/bin/python -m bench.alternatives [--fires N]   (N per approach, default 100)
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, Check, Section, percentile, summary, table

NAME = "alternatives"
NEEDS_CONTAINER = True
FIRES = 100  # per sub-second approach (--fires): the N >= 100 in `make bench`
LATE_MS = 5.0  # a fire later than this gets its row in the attribution table
AROUND_S = 0.2  # PID 1's activity and the host's steal: this long either side of an instant
SPACING_S = 2
SECONDS = range(6, 55, SPACING_S)  # usable seconds of each minute
LEAD_S = 40  # first fire this long after "now": sync, units, cron.d and APScheduler start
STAMP = "/usr/local/bin/bench-stamp"
STAMP_PY = "/usr/local/bin/bench-stamp-py"
STAMP_WARM = "/usr/local/bin/bench-stamp-warm"
STAMPS = "/var/lib/bench-stamps/stamps.log"
STEALS = "/var/lib/bench-stamps/steal.log"
STEAL_PY = "/opt/bench-aps/steal.py"
APS_DIR = "/opt/bench-aps"
APS_SCRIPT = f"{APS_DIR}/run.py"
OURS = "market-timers"
NOLEAD = "market-timers, lead 0s"
COLD = "market-timers, Python job"
WARM = "market-timers, warm Python job"
APPROACHES = (OURS, "systemd timer", "APScheduler", NOLEAD, COLD, WARM)
ALTERNATIVES = ("systemd timer", "APScheduler", "cron")
PREFIX = {OURS: "alt", "systemd timer": "plain", "APScheduler": "aps", "cron": "cron",
          NOLEAD: "nolead", COLD: "pycold", WARM: "pywarm"}
# market-timers rows: (stamp program, extra job keys)
OURS_JOBS = {OURS: (STAMP, ""), NOLEAD: (STAMP, 'lead = "0s"\n'), COLD: (STAMP_PY, ""),
             WARM: (STAMP_WARM, 'warm = "10s"\n')}
WARM_GOAL_MS = 1.0
COLD_GOAL_MS = 30.0
PY_STAMP = """#!/usr/bin/python3
import time
t = time.time()
import os, sys
fd = os.open("/var/lib/bench-stamps/stamps.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
os.write(fd, ("%s %s %s %.6f\\n" % (sys.argv[1], sys.argv[2], sys.argv[3], t)).encode())
"""
# The host's steal so far, in 1/USER_HZ s: field 8 of each cpuN line of /proc/stat (the warm
# stamp and the spin probe, both run in the container).
STEAL_SOURCE = """
def steal():
    with open("/proc/stat") as f:
        return sum(int(line.split()[8]) for line in f if line[:3] == "cpu" and line[3] != " ")
"""
WARM_STAMP = """#!/opt/venvs/market-timers/bin/python3
import os, sys, time
from market_timers.runner import instant_wait
from market_timers.jobnotify import wait_for_instant
""" + STEAL_SOURCE + """

def counters():
    with open("/proc/self/status") as f:
        switches = next(int(line.split()[1]) for line in f
                        if line.startswith("nonvoluntary_ctxt_switches"))
    return switches, steal()


# Diagnostics only (the job's own code is the 3 lines below them): wait_for_instant() calls
# instant_wait.sleep_until; wrapped, the spin's start is seen: how long before the instant the
# sleep woke; across the spin, the involuntary context switches, the host's steal, and the wall
# time the spinning thread did not run (wall - its CPU time: interrupts, the hypervisor).
spin = {}
real_sleep_until = instant_wait.sleep_until


def traced(deadline, before_spin=None, spin_s=instant_wait.SPIN):
    def mark():
        spin["counters"] = counters()
        spin["wall"], spin["cpu"] = time.time(), time.thread_time()
    return real_sleep_until(deadline, before_spin=mark, spin=spin_s)


instant_wait.sleep_until = traced
wait_for_instant()
t = time.time()
cpu = time.thread_time()
switches, steal = counters()
instant = int(sys.argv[3])
left = (instant - spin.get("wall", float("nan"))) * 1000
lost = ((t - spin.get("wall", t)) - (cpu - spin.get("cpu", cpu))) * 1000
s0, st0 = spin.get("counters", (switches, steal))
policy = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0x40000000)
fd = os.open("/var/lib/bench-stamps/stamps.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
os.write(fd, ("%s %s %s %.6f %.3f %d %d %d %.3f\\n" % (sys.argv[1], sys.argv[2], sys.argv[3], t,
              left, switches - s0, steal - st0, policy, lost)).encode())
"""
# The platform's floor for a spinning real-time thread: the same Python, SCHED_FIFO 1 (chrt), in
# the same container, after the fires: WINDOWS spins of 5 ms (as wait_for_instant()'s), GAP_S
# apart; in each, the longest gap between two consecutive clock reads. A gap is time the thread
# did not run although nothing in the guest may preempt it: interrupts, or the hypervisor not
# running the vCPU.
PROBE_WINDOWS = 600
PROBE_GAP_S = 0.05
PROBE = """
import sys, time
""" + STEAL_SOURCE + """
windows, gap = int(sys.argv[1]), float(sys.argv[2])
st = steal()
worst = []
for _ in range(windows):
    time.sleep(gap)
    end = time.perf_counter() + 0.005
    last = now = time.perf_counter()
    longest = 0.0
    while now < end:
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
    worst.append(longest * 1000)
print(steal() - st, *("%.4f" % w for w in worst))
"""
# The host's steal over each attributed fire: a sleeping sampler (it never spins: it must not
# take the CPU the fire needs) reads it AROUND_S before the instant and AROUND_S after.
STEAL_SAMPLER = """
import sys, time
""" + STEAL_SOURCE + """
around = float(sys.argv[2])
with open(sys.argv[1], "a", buffering=1) as out:
    for name, t in sorted((a.split("=") for a in sys.argv[3:]), key=lambda f: int(f[1])):
        t = int(t)
        if time.time() > t - around:
            continue
        time.sleep(t - around - time.time())
        before = steal()
        time.sleep(max(0.0, t + around - time.time()))
        out.write("%s %d %d\\n" % (name, before, steal()))
"""
APS_PROGRAM = '''"""An always-running APScheduler process: one date job per fire, each spawning the stamp."""
import subprocess
import sys
from datetime import datetime, timezone

sys.path.insert(0, "{aps_dir}/site")
from apscheduler.schedulers.blocking import BlockingScheduler  # noqa: E402
from apscheduler.triggers.date import DateTrigger  # noqa: E402

stamp = sys.argv[1]
scheduler = BlockingScheduler(timezone=timezone.utc)


def fire(name, epoch):
    subprocess.Popen([stamp, "APScheduler", name, str(epoch)])


for arg in sys.argv[2:]:
    name, epoch = arg.split("=")
    when = datetime.fromtimestamp(int(epoch), timezone.utc)
    scheduler.add_job(fire, DateTrigger(run_date=when), args=(name, int(epoch)),
                      misfire_grace_time=60)
print("bench-aps: scheduled", len(sys.argv) - 2, "fires", flush=True)
scheduler.start()
'''


def build_stamp() -> Path:
    out = REPO / "build" / "bench-stamp"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(["gcc", "-O2", "-static", "-o", str(out), str(REPO / "bench" / "stamp.c")],
                   check=True)
    return out


def fetch_apscheduler() -> Path:
    """APScheduler 3 (pure Python, with tzlocal) pip-installed into a directory on the host,
    then copied into the container next to its script (the container has no pip)."""
    target = REPO / "build" / "bench-aps-site"
    if not (target / "apscheduler").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target",
                        str(target), "APScheduler>=3.10,<4"], check=True)
    return target


def schedule(first: int, n: int = FIRES) -> dict[str, list[tuple[str, int]]]:
    """approach -> [(name, instant)]: round robin over the usable seconds from `first` on."""
    fires: dict[str, list[tuple[str, int]]] = {a: [] for a in APPROACHES}
    t = first
    k = 0
    while any(len(v) < n for v in fires.values()):
        if t % 60 in SECONDS:
            approach = APPROACHES[k % len(APPROACHES)]
            if len(fires[approach]) < n:
                fires[approach].append((f"{PREFIX[approach]}{len(fires[approach]):02d}", t))
            k += 1
        t += 1
    return fires


def cron_fires(first: int, last: int) -> list[tuple[str, int]]:
    minutes = range(math.ceil(first / 60) * 60, last + 1, 60)
    return [(f"cron{i:02d}", m) for i, m in enumerate(minutes)]


def market_config(fires: dict[str, list[tuple[str, int]]]) -> str:
    lines = ['calendar = "24/7"', "horizon = 1", ""]
    for approach, (program, keys) in OURS_JOBS.items():
        label = PREFIX[approach]
        for name, t in fires[approach]:
            midnight = datetime.fromtimestamp(t, UTC).replace(hour=0, minute=0, second=0)
            off = int(t - midnight.timestamp())
            lines += ["[[job]]", f'name = "{name}"', 'event = "open"', f'offset = "+{off}s"',
                      f'command = ["{program}", "{label}", "{name}", "{t}"]', 'timeout = "30s"',
                      'read_write_paths = ["/var/lib/bench-stamps"]', keys]
    return "\n".join(lines)


def plain_units(box, fires: list[tuple[str, int]]) -> list[str]:
    from bench.box import UNIT_DIR

    timers = []
    for name, t in fires:
        when = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
        box.write_file(f"{UNIT_DIR}/bench-{name}.timer",
                       f"[Timer]\nOnCalendar={when} UTC\nAccuracySec=1us\n")
        box.write_file(f"{UNIT_DIR}/bench-{name}.service",
                       # RemainAfterExit: the unit stays loaded, with its ExecMainStartTimestamp
                       f"[Service]\nType=exec\nRemainAfterExit=yes\n"
                       f"ExecStart={STAMP} systemd-timer {name} {t}\n")
        timers.append(f"bench-{name}.timer")
    return timers


def crontab(fires: list[tuple[str, int]]) -> str:
    lines = ["# bench/alternatives.py: one line per whole minute of the window", "SHELL=/bin/sh"]
    for name, t in fires:
        d = datetime.fromtimestamp(t, UTC)
        lines.append(f"{d.minute} {d.hour} {d.day} {d.month} * root {STAMP} cron {name} {t}")
    return "\n".join(lines) + "\n"


def setup(box) -> None:
    stamp = build_stamp()
    shutil.copy(stamp, box.root / STAMP.lstrip("/"))
    (box.root / STAMP.lstrip("/")).chmod(0o755)
    box.run(["install", "-d", "-m", "0777", "/var/lib/bench-stamps"])
    site = fetch_apscheduler()
    shutil.rmtree(box.root / APS_DIR.lstrip("/"), ignore_errors=True)
    shutil.copytree(site, box.root / APS_DIR.lstrip("/") / "site")
    box.write_file(APS_SCRIPT, APS_PROGRAM.format(aps_dir=APS_DIR))
    box.write_file(STAMP_PY, PY_STAMP, 0o755)
    box.write_file(STAMP_WARM, WARM_STAMP, 0o755)
    box.write_file(STEAL_PY, STEAL_SAMPLER)
    if box.run(["test", "-x", "/usr/sbin/cron"], check=False).returncode != 0:
        box.run("apt-get install -y -q cron >/dev/null 2>&1 || "
                "{ apt-get update -q >/dev/null && apt-get install -y -q cron; }", timeout=600)
    box.run(["systemctl", "enable", "--now", "cron.service"])


def _ratio(ours: dict | None, theirs: dict, key: str) -> str:
    return f"{ours[key] / theirs[key]:.2g}×" if ours and theirs[key] > 0 else "-"


def warm_diagnosis(late: dict[str, float], diag: dict[str, list[str]], n: int = 5) -> str:
    """The warm job's slowest fires, with what its stamp saw across the last-ms spin: when the
    sleep woke (ms before the instant: the spin began in time if positive), the job's involuntary
    context switches (preempted inside the guest), the host's steal (the vCPUs not run by the
    hypervisor, all CPUs, in 10 ms ticks), the spin's wall time its thread was not charged CPU
    for (interrupts, the hypervisor: a running SCHED_FIFO thread loses the CPU to nothing else),
    and its scheduling policy at the action (1 = SCHED_FIFO)."""
    rows = []
    for name, seconds in sorted(late.items(), key=lambda kv: -kv[1])[:n]:
        left, switches, steal, policy, lost = diag.get(name, ["?"] * 5)
        rows.append([name, seconds * 1000, left, switches, steal, lost,
                     {"1": "SCHED_FIFO", "0": "SCHED_OTHER"}.get(policy, policy)])
    return ("The warm job's slowest fires, and what its stamp saw across the spin of "
            "wait_for_instant()'s last 5 ms (bench/alternatives.py:WARM_STAMP):\n\n"
            + table(["fire", "late ms", "spin began, ms before the instant",
                     "involuntary switches", "steal ticks (10 ms)",
                     "ms of the spin not run", "policy"], rows))


def spin_probe(box) -> tuple[list[float], int]:
    """(longest gap in ms of each 5 ms spin, steal ticks of the whole probe): PROBE in the box."""
    out = box.run(["chrt", "-f", "1", "/opt/venvs/market-timers/bin/python3", "-c", PROBE,
                   str(PROBE_WINDOWS), str(PROBE_GAP_S)], timeout=300).stdout.split()
    return [float(x) for x in out[1:]], int(out[0])


def probe_text(gaps: list[float], steal: int, fires: int = FIRES) -> str:
    over = {ms: sum(g > ms for g in gaps) for ms in (0.5, 1.0, 2.0)}
    n = len(gaps)
    chance = (1 - over[1.0] / n) ** fires
    return (f"The platform's floor (after the fires, same container): a bare Python loop at "
            f"SCHED_FIFO 1 spinning {n} windows of 5 ms, {PROBE_GAP_S * 1000:.0f} ms apart, "
            f"reading the clock: the longest gap between two reads was over 0.5 ms in "
            f"{over[0.5]} windows, over 1 ms in {over[1.0]}, over 2 ms in {over[2.0]} "
            f"(max {max(gaps):.2f} ms; p99 {percentile(gaps, 99):.3f} ms); the host's steal over "
            f"the probe: {steal} ticks of 10 ms. At that rate {fires} spins all stay under 1 ms "
            f"with probability {chance:.0%} (bench/alternatives.py:PROBE).")


# PID 1's lines about a unit's start or stop (systemd 252's wording), and its reloads.
PID1_ACTION = re.compile(r"^(Starting|Started|Stopping|Stopped|Finished|Reloading)\b"
                         r"|: (Deactivated|Consumed|Succeeded|Failed|Main process exited)")
POLICIES = {"0": "OTHER", "1": "FIFO", "2": "RR", "3": "BATCH", "5": "IDLE"}


def stamp_fields(parts: list[str]) -> dict[str, str]:
    """The stamp's key=value fields after its four (bench/stamp.c)."""
    return dict(p.split("=", 1) for p in parts[4:] if "=" in p)


def counters(text: str | None) -> list[int] | None:
    """"MINFLT,MAJFLT,NVCSW,NIVCSW" (the stamp's ru=, xru=) as ints; None for "-"."""
    try:
        values = [int(x) for x in (text or "").split(",")]
    except ValueError:
        return None
    return values if len(values) == 4 else None


def pid1_activity(box, since: int) -> list[tuple[float, str, str]]:
    """(epoch, unit, what) of each unit start or stop PID 1 logged since `since`, and its
    reloads (unit ""): its journal lines with their __REALTIME_TIMESTAMP."""
    out = box.run(["journalctl", "--no-pager", "-q", "-o", "json", "_PID=1", f"--since=@{since}",
                   "--output-fields=MESSAGE,UNIT"], check=False, timeout=300).stdout
    events = []
    for line in out.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        match = PID1_ACTION.search(message) if isinstance(message, str) else None
        if match:
            events.append((int(entry["__REALTIME_TIMESTAMP"]) / 1e6, entry.get("UNIT", ""),
                           match.group(1) or match.group(2)))
    return events


def short_unit(unit: str) -> str:
    """market-alt03@2026-12-05-002015.service -> market-alt03@….service"""
    if "@" not in unit:
        return unit or "(daemon-reload)"
    name, rest = unit.split("@", 1)
    return f"{name}@…{rest[rest.rfind('.'):]}"


def nearby(events: list[tuple[float, str, str]], instant: int, own: str) -> list[str]:
    """PID 1's actions on other units than the fire's own within AROUND_S of its instant."""
    near = sorted((t - instant, unit, what) for t, unit, what in events
                  if abs(t - instant) <= AROUND_S and not unit.startswith(own))
    return [f"{short_unit(unit)} {what} {dt * 1000:+.0f}" for dt, unit, what in near]


def fork_times(box, names: list[str]) -> dict[str, float]:
    """fire name -> when systemd forked its plain unit's process (ExecMainStartTimestamp)."""
    units = [f"bench-{n}.service" for n in names]
    out = box.run(["systemctl", "show", "--timestamp=us+utc", "-p", "Id",
                   "-p", "ExecMainStartTimestamp", *units], check=False).stdout
    got = {}
    for block in out.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        words = props.get("ExecMainStartTimestamp", "").split()  # "Sat 2026-12-05 00:20:15.1 UTC"
        if len(words) >= 3 and "Id" in props:
            when = datetime.strptime(f"{words[1]} {words[2]} +0000", "%Y-%m-%d %H:%M:%S.%f %z")
            name = props["Id"].removeprefix("bench-").removesuffix(".service")
            got[name] = when.timestamp()
    return got


def steal_samples(text: str) -> dict[str, int]:
    """fire name -> the host's steal ticks over its ±AROUND_S (the sampler's log)."""
    got = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            got[parts[0]] = int(parts[2]) - int(parts[1])
    return got


def _pair(values: list[int] | None, i: int) -> str:
    return "-" if values is None else f"{values[i]}/{values[i + 1]}"


def attribute(approach: str, fires: list[tuple[str, int]], late: dict[str, float],
              extras: dict[str, dict[str, str]], forks: dict[str, float],
              steals: dict[str, int], events: list[tuple[float, str, str]]) -> list[dict]:
    """One record per fire of `approach` that left a stamp: its lateness split at the end of
    exec-at's wait (market-timers) or systemd's fork (the plain unit), and what else ran."""
    records = []
    for name, instant in fires:
        if name not in late:
            continue
        f = extras.get(name, {})
        ru, xru = counters(f.get("ru")), counters(f.get("xru"))
        if approach == OURS:
            mark = float(f["woke"]) if f.get("woke", "-") != "-" else None
            before, after = xru, (None if ru is None or xru is None else
                                  [a - b for a, b in zip(ru, xru, strict=True)])
            own = f"market-{name}@"
        else:
            mark, before, after, own = forks.get(name), None, ru, f"bench-{name}."
        records.append({
            "fire": name, "late": late[name] * 1000,
            "mark": None if mark is None else (mark - instant) * 1000,
            "rest": None if mark is None else (instant + late[name] - mark) * 1000,
            "policy": POLICIES.get(f.get("policy", "?"), f.get("policy", "?")),
            "before": before, "after": after, "steal": steals.get(name),
            "pid1": nearby(events, instant, own)})
    return records


def neighbours(records: list[dict], n: int = 6) -> str:
    """The commonest of PID 1's actions near the fires (unit and verb, offsets dropped; the
    bench's job units counted together: market-altNN@….service)."""
    seen = Counter(re.sub(r"^(market-[a-z]+|bench-[a-z]+)\d+", r"\1NN", e.rsplit(" ", 1)[0])
                   for r in records for e in r["pid1"])
    return ", ".join(f"{what} ×{k}" for what, k in seen.most_common(n)) or "none"


def _ms(value: float | None) -> object:
    return "?" if value is None else value


def attribution_text(by_approach: dict[str, list[dict]]) -> str:
    """The table of every fire later than LATE_MS, and what the on-time fires saw for contrast."""
    lines = []
    rows = []
    for approach, records in by_approach.items():
        if not records:
            continue
        mark = "exec-at's wait ended" if approach == OURS else "systemd forked the unit's process"
        late = [r for r in records if r["late"] > LATE_MS]
        on_time = [r for r in records if r["late"] <= LATE_MS]
        marks = [r["mark"] for r in records if r["mark"] is not None]
        rests = [r["rest"] for r in records if r["rest"] is not None]

        def share(rs: list[dict], test) -> str:
            return f"{sum(1 for r in rs if test(r))}/{len(rs)}"

        def split(xs: list[float]) -> str:
            return (f"p50 {percentile(xs, 50):.2f}, p99 {percentile(xs, 99):.2f}, "
                    f"max {max(xs):.2f} ms" if xs else "not recorded")

        lines.append(
            f"**{approach}**, {len(records)} fires, {len(late)} later than {LATE_MS:g} ms. "
            f"Instant → {mark}: {split(marks)}; from then → the stamp: {split(rests)}. "
            f"Late fires / on-time fires with: the host's steal over ±{AROUND_S * 1000:.0f} ms "
            f"{share(late, lambda r: (r['steal'] or 0) > 0)} / "
            f"{share(on_time, lambda r: (r['steal'] or 0) > 0)}; PID 1 starting or stopping "
            f"another unit within ±{AROUND_S * 1000:.0f} ms {share(late, lambda r: r['pid1'])} / "
            f"{share(on_time, lambda r: r['pid1'])}; a major fault after the fork or exec "
            f"{share(late, lambda r: r['after'] is not None and r['after'][1] > 0)} / "
            f"{share(on_time, lambda r: r['after'] is not None and r['after'][1] > 0)}; "
            f"SCHED_FIFO at the stamp {share(late, lambda r: r['policy'] == 'FIFO')} / "
            f"{share(on_time, lambda r: r['policy'] == 'FIFO')}. PID 1's actions near these "
            f"instants, most frequent first: {neighbours(records)}.")
        for r in sorted(late, key=lambda r: -r["late"]):
            pid1 = r["pid1"][:4] + ([f"+{len(r['pid1']) - 4} more"] if len(r["pid1"]) > 4 else [])
            rows.append([approach, r["fire"], r["late"], _ms(r["mark"]), _ms(r["rest"]),
                         r["policy"], _pair(r["before"], 0), _pair(r["after"], 0),
                         _pair(r["before"], 2), _pair(r["after"], 2),
                         "?" if r["steal"] is None else r["steal"],
                         "; ".join(pid1) or "none"])
    text = ("Per-fire attribution (issue 28): every fire of these two rows later than "
            f"{LATE_MS:g} ms. market-timers: the stamp's process is the runner's, exec'd into "
            "exec-at, then the stamp: \"before the exec\" is what the runner and exec-at cost "
            "(MARKET_EXEC_AT_RUSAGE), \"exec + stamp\" the rest (the stamp's getrusage() − that). "
            "systemd timer: the counters from systemd's fork (sandbox set-up, exec, stamp), and "
            "\"forked\" is ExecMainStartTimestamp, which PID 1 takes after its fork() returns: "
            "the child may have run first, hence a → stamp below 0. Steal "
            f"in 10 ms ticks over ±{AROUND_S * 1000:.0f} ms of the instant (all CPUs, a sleeping "
            "sampler in the container); PID 1: the units it started or stopped then (its journal, "
            "ms from the instant; the fire's own unit left out).\n\n" + "\n\n".join(lines))
    if rows:
        text += "\n\n" + table(
            ["approach", "fire", "late ms", "wait ended / forked, ms", "→ stamp ms", "policy",
             "faults min/maj before the exec", "faults min/maj, exec + stamp",
             "switches vol/invol before the exec", "switches vol/invol, exec + stamp",
             "steal ticks", "PID 1 within ±200 ms (ms)"], rows)
    else:
        text += f"\n\nNo fire of these rows was later than {LATE_MS:g} ms."
    return text


def run(box, per_approach: int = FIRES) -> Section:
    from bench.box import CONFIG, clear_market_units, now_inside

    s = Section(NAME, "1b. The alternatives side by side (same run, same container, same stamp)")
    setup(box)
    clear_market_units(box)
    box.run(f"rm -f {STAMPS} {STEALS} /etc/cron.d/bench-cron; "
            f"install -m 0666 /dev/null {STAMPS}")
    first = math.ceil(now_inside(box)) + LEAD_S
    fires = schedule(first, per_approach)
    last = max(t for v in fires.values() for _, t in v)
    fires["cron"] = cron_fires(first, last)

    started = time.monotonic()
    box.write_file(CONFIG, market_config(fires))
    box.run(["market-timers", "sync"], timeout=120)
    timers = plain_units(box, fires["systemd timer"])
    box.systemctl("daemon-reload")
    box.systemctl("start", *timers)
    box.run(["systemd-run", "--unit=bench-aps", "--property=Type=exec", "/usr/bin/python3",
             APS_SCRIPT, STAMP, *[f"{n}={t}" for n, t in fires["APScheduler"]]])
    box.run(["systemd-run", "--unit=bench-steal", "--property=Type=exec", "/usr/bin/python3",
             STEAL_PY, STEALS, str(AROUND_S),
             *[f"{n}={t}" for a in (OURS, "systemd timer") for n, t in fires[a]]])
    box.write_file("/etc/cron.d/bench-cron", crontab(fires["cron"]))
    setup_s = time.monotonic() - started
    if now_inside(box) > first - 12:  # a warm job's timer fires 10 s before its instant
        raise RuntimeError(f"set-up took {setup_s:.0f} s, longer than the {LEAD_S} s lead")
    time.sleep(max(0.0, last + 6 - time.time()))

    got: dict[str, dict[str, float]] = {a: {} for a in fires}
    warm_diag: dict[str, list[str]] = {}  # the warm stamp's extra fields, by fire name
    extras: dict[str, dict[str, dict[str, str]]] = {a: {} for a in fires}  # the C stamp's
    for line in box.read_file(STAMPS).splitlines():
        parts = line.split()
        if len(parts) >= 4:
            by_label = {"systemd-timer": "systemd timer",
                        **{PREFIX[a]: a for a in OURS_JOBS}}
            approach = by_label.get(parts[0], parts[0])
            if approach in got:
                got[approach].setdefault(parts[1], float(parts[3]) - int(parts[2]))
                if approach == WARM and len(parts) == 9:
                    warm_diag.setdefault(parts[1], parts[4:])
                elif len(parts) > 4:
                    extras[approach].setdefault(parts[1], stamp_fields(parts))
    forks = fork_times(box, [n for n, _ in fires["systemd timer"]])
    steals = steal_samples(box.read_file(STEALS) if (box.root / STEALS.lstrip("/")).exists()
                           else "")
    events = pid1_activity(box, first - 10)
    box.systemctl("stop", "bench-aps.service", "bench-steal.service", check=False)
    box.run("rm -f /etc/cron.d/bench-cron; "
            "systemctl stop 'bench-plain*.timer' 'bench-plain*.service'; "
            "rm -f /etc/systemd/system/bench-plain*; systemctl daemon-reload", check=False)

    stats = {a: summary([x * 1000 for x in v.values()]) for a, v in got.items() if v}
    ours = stats.get(OURS)
    rows = []
    for approach in (OURS, *ALTERNATIVES, NOLEAD, COLD, WARM):
        st = stats.get(approach)
        n = f"{len(got[approach])}/{len(fires[approach])}"
        if st is None:
            rows.append([approach, n, "-", "-", "-", "-", "-", "-", "-"])
            continue
        rows.append([approach, n, st["p50"], st["p90"], st["p95"], st["p99"], st["max"],
                     _ratio(ours, st, "p50"), _ratio(ours, st, "p99")])
    s.add(table(["approach", "fired", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms",
                 "ours ÷ this, p50", "ours ÷ this, p99"], rows))
    attributed = {a: attribute(a, fires[a], got[a], extras[a], forks, steals, events)
                  for a in (OURS, "systemd timer")}
    s.add(attribution_text(attributed))
    late = [r for r in attributed[OURS] if r["late"] > LATE_MS]
    outside = [r for r in late if (r["steal"] or 0) > 0]
    s.checks.append(Check(
        f"every market-timers fire later than {LATE_MS:g} ms has the host's steal in its "
        f"±{AROUND_S * 1000:.0f} ms (a cause outside the guest)",
        len(outside) == len(late) if attributed[OURS] else None,
        f"{len(outside)} of {len(late)} late fires" + (
            ": not " + ", ".join(r["fire"] for r in late if r not in outside)
            if len(outside) < len(late) else "")))
    if got[WARM]:
        s.add(warm_diagnosis(got[WARM], warm_diag))
    try:
        s.add(probe_text(*spin_probe(box), fires=per_approach))
    except Exception as e:  # a diagnostic: its failure must not lose the section
        s.add(f"(the spin probe failed: {type(e).__name__}: {e})")
    version = box.run(["systemctl", "--version"]).stdout.splitlines()[0]
    cron_v = box.run(["dpkg-query", "-W", "-f", "${Version}", "cron"], check=False).stdout
    aps_v = next((p.name.removesuffix(".dist-info").split("-")[1] for p in (box.root / APS_DIR.lstrip("/") / "site").glob(
        "[Aa][Pp][Ss]cheduler-*.dist-info")), "?")
    s.add(f"{version}; Debian cron {cron_v}; APScheduler {aps_v} (BlockingScheduler, one "
          "`date` job per fire, `subprocess.Popen` of the stamp) on Debian's /usr/bin/python3. "
          "Lateness = the stamp's first `clock_gettime(CLOCK_REALTIME)` − the whole-second "
          "instant. market-timers: its rendered timer + service (sandbox, `User=`), the runner "
          "(Python: claim, lock, escort), then `market-timers-exec-at` (C: waits for the "
          "instant, execs the stamp), real-time (SCHED_FIFO 1) from 50 ms before the instant "
          "to 100 ms after, or to the end of a slower exec (runner/realtime.py). systemd timer: `OnCalendar=` + `AccuracySec=1us`, "
          "`Type=exec`, `ExecStart=` the stamp, no sandbox, no runner. cron: one line per whole "
          f"minute of the same {(last - first) / 60:.1f}-minute window, so only "
          f"{len(fires['cron'])} fires (cron cannot do seconds). The set-up took {setup_s:.0f} s.")
    best = min(((stats[a]["p99"], a) for a in ALTERNATIVES if a in stats), default=None)
    if ours and best:
        s.checks.append(Check(
            "instant → job exec p99 no worse than the best alternative in the same run",
            ours["p99"] <= best[0] and len(got[OURS]) == per_approach,
            f"market-timers p99 {ours['p99']:.1f} ms vs {best[1]} p99 {best[0]:.1f} ms "
            f"({len(got[OURS])}/{per_approach} fired)"))
        s.headline.append("instant → stamp p99: " + ", ".join(
            f"{a} {stats[a]['p99']:.1f} ms" for a in (OURS, *ALTERNATIVES, NOLEAD, COLD, WARM)
            if a in stats))
    else:
        s.checks.append(Check("alternatives", None, "not every approach left stamps"))
    for approach, goal, what in ((WARM, WARM_GOAL_MS, "instant → a warm Python job's action"),
                                 (COLD, COLD_GOAL_MS, "a plain (cold) Python job's first line")):
        st = stats.get(approach)
        s.checks.append(Check(
            f"{what} p99 ≤ {goal:g} ms", None if st is None else
            st["p99"] <= goal and len(got[approach]) == per_approach,
            "no stamps" if st is None else f"p50 {st['p50']:.2f} ms, p99 {st['p99']:.2f} ms, "
            f"max {st['max']:.2f} ms ({len(got[approach])}/{per_approach})"))
    s.commands += [
        f"gcc -O2 -static -o build/bench-stamp bench/stamp.c   # copied to {STAMP}",
        "python3 -m pip install --target build/bench-aps-site 'APScheduler>=3.10,<4'",
        "apt-get install cron   # inside the container",
        f"# market-timers: 4 × {per_approach} jobs on calendar \"24/7\" (default lead 2s; lead \"0s\"; "
        "a Python stamp; warm \"10s\" + wait_for_instant()), command [STAMP, ...]; "
        "market-timers sync   (bench/alternatives.py:market_config)",
        "# systemd: bench-plainNN.timer (OnCalendar=..., AccuracySec=1us) + .service "
        "(Type=exec, RemainAfterExit=yes, ExecStart=STAMP ...); systemctl start bench-plain*.timer",
        f"systemd-run --unit=bench-steal /usr/bin/python3 {STEAL_PY} {STEALS} {AROUND_S} NAME=EPOCH ...",
        "journalctl -o json _PID=1 --since=@FIRST   # PID 1's starts and stops near each instant",
        "systemctl show --timestamp=us+utc -p ExecMainStartTimestamp bench-plainNN.service",
        f"systemd-run --unit=bench-aps /usr/bin/python3 {APS_SCRIPT} STAMP apsNN=EPOCH ...",
        "# /etc/cron.d/bench-cron: 'M H D Mo * root STAMP cron cronNN EPOCH' per minute",
        f"cat {STAMPS}",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    parser = argparse.ArgumentParser(description="The alternatives side by side, with the "
                                     "per-fire attribution of the market-timers and plain "
                                     "systemd rows; prints the RESULTS.md section.")
    parser.add_argument("--fires", type=int, default=FIRES, metavar="N",
                        help=f"fires per sub-second approach (default {FIRES}; 6 approaches "
                             "share 25 fires a minute)")
    main_standalone(functools.partial(run, per_approach=parser.parse_args().fires),
                    NEEDS_CONTAINER)
