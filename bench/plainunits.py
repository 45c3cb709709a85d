"""The same fires written by hand as plain systemd units, the yardstick of bench/scale.py (issue
46): per fire one `.timer` (OnCalendar= the instant in UTC, Persistent=) and one oneshot
`.service` running /bin/true, written into /etc/systemd/system, one `daemon-reload`, the timers
started 500 to a call. What an engineer would write without market-timers, per session.
"""

from __future__ import annotations

import statistics
import time

UNIT_DIR = "/etc/systemd/system"
PREFIX = "bench-plain-"
RELOADS = 3
CHUNK = 500  # timers per `systemctl start`: below the D-Bus queue that overflowed at ~7,900

# Runs inside the container (python3 is there: the package needs it): 2 files per fire, written
# in one process rather than 20,000 `write_file` round trips.
WRITER = """
import sys, datetime as dt
jobs, horizon, first = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for i in range(jobs):
    for k in range(horizon):
        at = dt.datetime.fromtimestamp(first + i + k * 86400, dt.timezone.utc)
        stem = f"{UNIT_DIR}/{PREFIX}{i:04d}-{k:02d}"
        open(stem + ".timer", "w").write(
            f"[Unit]\\nDescription=plain fire {i} {k}\\n\\n[Timer]\\n"
            f"OnCalendar={at:%Y-%m-%d %H:%M:%S} UTC\\nAccuracySec=1s\\nPersistent=true\\n")
        open(stem + ".service", "w").write(
            f"[Unit]\\nDescription=plain job {i} session {k}\\n\\n[Service]\\nType=oneshot\\n"
            "ExecStart=/bin/true\\n")
""".replace("{UNIT_DIR}", UNIT_DIR).replace("{PREFIX}", PREFIX)


def install(box, jobs: int, horizon: int, first: float) -> dict:
    """Write, reload, start, reload again: the seconds of each (the first reload loads nothing:
    the files are only read once a timer is started), and how many timers are active after."""
    box.write_file("/root/plain_units.py", WRITER)
    box.run(["python3", "/root/plain_units.py", str(jobs), str(horizon), str(first)],
            timeout=600)
    t0 = time.perf_counter()
    box.run(["systemctl", "daemon-reload"], timeout=1200)
    reload_s = time.perf_counter() - t0
    names = [f"{PREFIX}{i:04d}-{k:02d}.timer" for i in range(jobs) for k in range(horizon)]
    t0 = time.perf_counter()
    for at in range(0, len(names), CHUNK):
        box.run(["systemctl", "start", *names[at:at + CHUNK]], timeout=600)
    start_s = time.perf_counter() - t0
    loaded = []  # the yardstick: a reload with every fire's units loaded, 3 times (one varied
    for _ in range(RELOADS):  # from 7 to 56 s between runs of the same code on this machine)
        t0 = time.perf_counter()
        box.run(["systemctl", "daemon-reload"], timeout=1200)
        loaded.append(time.perf_counter() - t0)
    active = int(box.run(f"systemctl list-units --type=timer --state=active --plain "
                         f"--no-legend '{PREFIX}*' | wc -l").stdout.strip())
    return {"reload_s": reload_s, "start_s": start_s,
            "loaded_reload_s": statistics.median(loaded), "loaded_reloads": loaded,
            "active": active}


def remove(box) -> None:
    """Every plain unit stopped, deleted and forgotten."""
    box.run(f"systemctl stop '{PREFIX}*.timer' >/dev/null 2>&1; "
            f"rm -f {UNIT_DIR}/{PREFIX}* /var/lib/systemd/timers/stamp-{PREFIX}*; "
            f"systemctl daemon-reload; systemctl reset-failed '{PREFIX}*' >/dev/null 2>&1; true",
            timeout=1200)
