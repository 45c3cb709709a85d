"""Event flood (host, in-process): N events spooled at once (each a distinct warning, so each an
alert but for the bound on one source's messages, events/flood.py), then one critical behind
them; one processor pass with Telegram at a fake API on 127.0.0.1. Reports the pass's duration,
the messages sent and when the critical reached the channel.

Run alone: .venv/bin/python -m bench.event_flood [N ...]   (default 1000 10000)
"""

from __future__ import annotations

import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Check, Section, ensure_repo_on_path, scratch_dir, table  # noqa: E402
from bench.fake_telegram import TOKEN, StampedFakeApi  # noqa: E402

ensure_repo_on_path()

NAME = "event_flood"
NEEDS_CONTAINER = False
SIZES = (1000, 10000)
PASS_GOAL_S = 240.0  # process.MAX_RUN, inside market-events.service's TimeoutStartSec=300
CRITICAL_GOAL_S = 5.0


def one_flood(n: int) -> dict:
    from market_timers.alerts.context import AlertContext
    from market_timers.channels.credentials import OVERRIDE
    from market_timers.config import loader as config_mod
    from market_timers.events import process, spool
    from market_timers.schema.problems import Problems

    root = scratch_dir(f"event-flood-{n}-")
    example = Path(config_mod.__file__).parents[3] / "scripts/examples/market-timers.example.toml"
    creds = root / "creds"
    creds.mkdir()
    (creds / "market-timers.telegram-token").write_text(TOKEN + "\n")
    with StampedFakeApi(token=TOKEN) as api:
        raw = tomllib.loads(example.read_text())
        raw["alerts"] = {"telegram": {"chat_id": "1", "api_base": api.base}}
        raw.update(state_dir=str(root / "state"), spool_dir=str(root / "spool"),
                   runtime_dir=str(root / "run"))
        cfg = config_mod.parse(raw, Problems(str(example)))
        dirs = process.spool_dirs(cfg)
        for d in dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            spool.write(spool.make_event("order_note", key=f"O{i}", severity="warning"), dirs)
        spool.write(spool.make_event("kill_switch", key="all", severity="critical"), dirs)
        ctx = AlertContext(cfg.alerts, cfg.state_dir, cfg.spool_dir, env={OVERRIDE: str(creds)})
        start = time.time()
        process.drain(ctx, cfg.events, cfg.state_dir, dirs, datetime.now(UTC))
        end = time.time()
        critical = [m["received"] for m in api.received() if "kill_switch" in m["text"]]
        messages = len(api.received())
    return {"n": n, "pass_s": end - start, "messages": messages,
            "critical_s": (critical[0] - start) if critical else None}


def run(_box=None, sizes=SIZES) -> Section:
    s = Section(NAME, "Event flood: one pass over N spooled events, a critical behind them")
    s.commands.append("python -m bench.event_flood " + " ".join(map(str, sizes)))
    rows = [one_flood(n) for n in sizes]
    s.add(table(["events", "pass (s)", "messages sent", "critical at channel (s)"],
                [[r["n"], f"{r['pass_s']:.1f}", r["messages"], "never" if r["critical_s"] is None
                  else f"{r['critical_s']:.2f}"] for r in rows]))
    for r in rows:
        s.checks.append(Check(f"{r['n']} events in one pass", r["pass_s"] < PASS_GOAL_S,
                              f"{r['pass_s']:.1f} s (goal < {PASS_GOAL_S:.0f} s)"))
        s.checks.append(Check(f"the critical behind {r['n']}", r["critical_s"] is not None
                              and r["critical_s"] < CRITICAL_GOAL_S,
                              "never" if r["critical_s"] is None
                              else f"{r['critical_s']:.2f} s (goal < {CRITICAL_GOAL_S:.0f} s)"))
    return s


if __name__ == "__main__":
    sizes = tuple(int(a) for a in sys.argv[1:]) or SIZES
    print(run(sizes=sizes).markdown())
