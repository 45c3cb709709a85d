"""A thousand jobs on one host (issue 46), in a booted Debian 12 with the .deb installed: at N =
10, 100 and 1,000 jobs (a horizon of 10 sessions, the default before issue 46: 10 N timers), `market-timers sync`
first, unchanged and with one job's command changed (its time, exit status, daemon-reloads), the
timers active after it, the units PID 1 holds and its RSS growth, and a dead-man pass's CPU (its
own process and PID 1's), the first after the sync (it reads every timer) and the next (only
those due soon); beside them, in the same container, the same fires written as plain per-session
units (bench/plainunits.py): the yardstick of the issue's goals.

Run alone: .venv/bin/python -m bench.scale   (under the team's e2e lock: it boots a container)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, table

NAME = "scale"
NEEDS_CONTAINER = True
SIZES = [10, 100, 1000]
HORIZON = 10
CHANGE_BUDGET_S = 1500  # past this much of the run, the one-job change (a reload) is skipped
TICK = 100  # CLK_TCK: /proc/1/stat counts CPU in 1/100 s


OWN_USERS = 900  # past this many jobs of their own users, Debian's system uids run out


def config_text(jobs: int, now: float, changed: bool = False) -> str:
    """24/7 calendar; job i fires 3 h + i s after now's time of day (none fires during the
    bench); `changed`: job 0 runs another command (its services are rewritten: one reload).
    Jobs past OWN_USERS share the package's job user, as docs/sizing.md says to."""
    from market_timers.contracts.environment import DEFAULT_JOB_USER

    tod = int(now) % 86400 + 3 * 3600
    lines = ['calendar = "24/7"', f"horizon = {HORIZON}", "", "[watch]", "slack_sec = 2", ""]
    for i in range(jobs):
        h, rest = divmod((tod + i) % 86400, 3600)
        command = "/bin/false" if changed and i == 0 else "/bin/true"
        lines += ["[[job]]", f'name = "scale{i:04d}"', 'event = "open"',
                  f'offset = "+{h}h{rest // 60}min{rest % 60}s"', f'command = ["{command}"]',
                  *([f'user = "{DEFAULT_JOB_USER}"'] if i >= OWN_USERS else []), ""]
    return "\n".join(lines)


def pid1(box) -> tuple[float, float]:
    """(RSS MiB, CPU s) of PID 1."""
    status = box.run(["cat", "/proc/1/status"]).stdout
    rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:"))
    fields = box.run(["cat", "/proc/1/stat"]).stdout.rsplit(")", 1)[1].split()
    return rss / 1024, (int(fields[11]) + int(fields[12])) / TICK


def sync(box, config: str | None = None) -> dict:
    from bench.box import CONFIG

    if config is not None:
        box.write_file(CONFIG, config)
    reloads = box.daemon_reloads()
    t0 = time.perf_counter()
    done = box.run(["market-timers", "sync", "-v"], check=False, timeout=1200)  # -v: every unit
    wall = time.perf_counter() - t0
    time.sleep(0.3)  # PID 1's "Reloading." reaches the journal
    return {"s": wall, "exit": done.returncode, "err": len(done.stderr),
            "started": sum(1 for x in done.stdout.splitlines() if x.startswith("start ")),
            "nothing": done.stdout.strip().startswith("nothing to do"),
            "stderr": done.stderr[:300],
            "reloads": box.daemon_reloads() - reloads}


def active_timers(box) -> int:
    out = box.run("systemctl list-units --type=timer --state=active --plain --no-legend "
                  "'market-scale*' | wc -l").stdout
    return int(out.strip())


def deadman_pass(box) -> tuple[float, float]:
    """(the pass's own CPU ms, PID 1's CPU ms during it): `market-timers deadman` as the
    package's user, as market-deadman.service runs it."""
    _, before = pid1(box)
    out = box.run(["bash", "-c", "TIMEFORMAT='%U %S'; { time runuser -u market-timers -- "
                   "market-timers deadman >/dev/null 2>&1; } 2>&1"], check=False,
                  timeout=600).stdout.split()
    _, after = pid1(box)
    return (float(out[-2]) + float(out[-1])) * 1000, (after - before) * 1000


def clear(box) -> float:
    """Every job's timers stopped and deleted by a sync of a config without jobs (500 stops to a
    call), then what is left (bench/box.py); the sync's seconds."""
    from bench.box import clear_market_units

    gone = sync(box, 'calendar = "24/7"\n')["s"]
    clear_market_units(box)
    return gone


def fresh_pid1(box) -> tuple[int, float]:
    """(loaded units, RSS MiB) of a PID 1 re-executed just now: its heap holds nothing of what
    the last measurement loaded and freed, so the growth that follows is this one's own."""
    from bench.box import loaded_units

    box.run(["systemctl", "daemon-reexec"], timeout=300)
    time.sleep(1)
    return loaded_units(box), pid1(box)[0]


def plain_size(box, jobs: int, now: float) -> dict:
    """The same fires as plain per-session units (bench/plainunits.py): the reload's seconds, the
    units and RSS PID 1 grows by."""
    from bench import plainunits
    from bench.box import loaded_units

    units0, rss0 = fresh_pid1(box)
    tod = int(now) % 86400 + 3 * 3600  # config_text's first fire
    done = plainunits.install(box, jobs, HORIZON, int(now) - int(now) % 86400 + tod)
    done.update(units=loaded_units(box) - units0, rss=pid1(box)[0] - rss0)
    plainunits.remove(box)
    return done


def one_size(box, jobs: int, started_at: float) -> tuple[list[object], dict]:
    from bench.box import loaded_units, log, now_inside

    clear(box)
    now = now_inside(box)
    plain = plain_size(box, jobs, now)
    units0, rss0 = fresh_pid1(box)
    first = sync(box, config_text(jobs, now))
    if first["stderr"]:
        log(f"scale: {jobs} jobs: first sync's stderr begins: {first['stderr']!r}")
    time.sleep(3)  # past the dead-man's settling time (slack_sec = 2) after a sync
    active = active_timers(box)
    units1, (rss1, _) = loaded_units(box), pid1(box)
    pass1 = deadman_pass(box)
    pass2 = deadman_pass(box)
    unchanged = sorted((sync(box) for _ in range(3)), key=lambda r: r["s"])[1]  # the median
    if time.monotonic() - started_at < CHANGE_BUDGET_S:
        changed = sync(box, config_text(jobs, now, changed=True))
        change = f"{changed['s']:.1f} s, {changed['reloads']} reload(s), exit {changed['exit']}"
    else:
        change = "skipped (time budget)"
    return [jobs, jobs * HORIZON, f"{first['s']:.1f} s, exit {first['exit']}",
            f"{active}/{first['started']}", first["err"],
            f"{unchanged['s']:.2f} s, {unchanged['reloads']} reload(s)"
            + ("" if unchanged["nothing"] else ", NOT 'nothing to do'"), change,
            units1 - units0, round(rss1 - rss0, 1), f"{pass1[0]:.0f} + {pass1[1]:.0f}",
            f"{pass2[0]:.0f} + {pass2[1]:.0f}",
            f"{plain['loaded_reload_s']:.1f} s ("
            + ", ".join(f"{x:.1f}" for x in plain["loaded_reloads"]) + ")",
            f"{plain['start_s']:.1f} s", f"{plain['units']} units, {plain['rss']:.1f} MiB "
            f"({plain['active']} active)", round((rss1 - rss0) / max(plain["rss"], 0.1), 2),
            round(first["s"] / max(plain["loaded_reload_s"], 0.01), 2),
            round(unchanged["s"] / max(plain["loaded_reload_s"], 0.01), 3),
            round(first["s"] / max(plain["loaded_reload_s"] + plain["start_s"], 0.01), 2)], plain


def unchanged_s(row: list) -> float:
    return float(row[5].split(" s")[0])


def goals(big: list, plain: dict) -> list[Check]:
    """The issue's goals at 1,000 jobs, as ratios to the same fires written as plain units."""
    own, pid = (float(x) for x in big[10].split(" + "))
    return [
        Check("sync of 1,000 jobs exits 0 with every timer active",
              big[2].endswith("exit 0") and big[3].split("/")[0] == big[3].split("/")[1],
              f"{big[2]}, {big[3]} active/started"),
        Check("first sync ≤ 1.5× one daemon-reload of the plain units (all loaded, median of 3)",
              big[15] <= 1.5, f"{big[15]}× ({big[2]} / {big[11]})"),
        Check("first sync ≤ 1.5× installing the plain units (that reload + starting their "
              "timers)", big[17] <= 1.5, f"{big[17]}× ({big[2]} / {big[11].split()[0]} s + "
              f"{big[12]})"),
        Check("unchanged sync ≤ 0.05× that reload", big[16] <= 0.05, f"{big[16]}×"),
        Check("unchanged sync ≈ 2 s (the issue's figure), no reload",
              unchanged_s(big) <= 2.0 and big[5].split(", ")[1].startswith("0 reload"),
              big[5]),
        Check("PID 1 growth ≤ 1.5× the plain units' + 16 MiB",
              big[8] <= 1.5 * plain["rss"] + 16,
              f"{big[8]} MiB against {plain['rss']:.1f} MiB plain"),
        Check("a dead-man pass at 1,000 jobs, nothing due, ≤ 300 ms of CPU (own + PID 1)",
              own + pid <= 300, f"{own:.0f} + {pid:.0f} ms"),
    ]


def run(box) -> Section:
    from bench.box import log

    s = Section(NAME, "A thousand jobs on one host (issue 46)")
    started_at = time.monotonic()
    box.run(["systemctl", "stop", "market-deadman.timer"])  # no pass of its own meanwhile
    rows, plains = [], []
    try:
        for jobs in SIZES:
            row, plain = one_size(box, jobs, started_at)
            rows.append(row)
            plains.append(plain)
            log(f"scale: {jobs} jobs done: {rows[-1]}")
        s.add(f"Removing the {SIZES[-1]} jobs (a sync of a config without jobs: every timer "
              f"stopped and deleted): {clear(box):.1f} s.")
    finally:
        box.run(["systemctl", "start", "market-deadman.timer"], check=False)
    s.add(table(["jobs", "timers", "first sync", "timers active / started", "stderr bytes",
                 "unchanged sync", "one job changed", "units loaded (growth)",
                 "PID 1 RSS growth MiB", "dead-man pass after sync, CPU ms (own + PID 1)",
                 "next pass, CPU ms (own + PID 1)",
                 "plain units: daemon-reload, all loaded (median; each)",
                 "plain units: start of their timers", "plain units: PID 1 growth",
                 "RSS growth / plain's", "first sync / plain reload",
                 "unchanged sync / plain reload", "first sync / plain reload + start"], rows))
    big = rows[-1]
    s.checks += goals(big, plains[-1])
    s.headline.append(f"scale: 1,000 jobs: first sync {big[2]}; unchanged {big[5]}; "
                      f"+{big[7]} units, +{big[8]} MiB PID 1; dead-man pass {big[10]} ms "
                      f"(after a sync {big[9]} ms)")
    s.commands += [
        "# config: calendar \"24/7\", N jobs scale0000.., horizon 10, fires 3 h ahead "
        "(bench/scale.py:config_text)",
        "market-timers sync   # first; then unchanged (x3, the median); then job 0's command "
        "changed",
        "systemctl list-units --type=timer --state=active 'market-scale*' | wc -l",
        "systemctl show --value -p NNames; grep VmRSS /proc/1/status",
        "time runuser -u market-timers -- market-timers deadman   # x2; /proc/1/stat CPU",
        "# plain: 2 files per fire (bench/plainunits.py), systemctl daemon-reload, "
        "systemctl start 500 timers a call; systemctl daemon-reexec before each side",
    ]
    return s


if __name__ == "__main__":
    from bench.common import main_standalone

    main_standalone(run, NEEDS_CONTAINER)
