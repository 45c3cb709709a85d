#!/usr/bin/env python3
"""Example: a broker gateway hands its connection and order events to market-timers.

The gateway is a long-running process beside the jobs, with its own user in the group
market-timers-spool (`usermod -aG market-timers-spool tradingd`; its unit needs
`ReadWritePaths=/var/spool/market-timers/events /run/market-timers/events` under
ProtectSystem=). Each call spools one small file (fsync + rename, a few milliseconds, no lock)
and returns; market-events.service routes it under the [events] rules of the config:

    a lost heartbeat + the broker's close + the reconnect -> ONE "connection" incident, alerted
    only if it lasts more than interrupt_after; a rejection -> critical at once; the system's own
    cancellations -> the digest.

From a shell script the same is `market-timers event rejected --key R00007 --text "..."`.
Run it by hand to see the calls: `gateway-events.py --demo` (spools three events).
"""

from __future__ import annotations

import sys

from market_timers.jobnotify import event


class Gateway:
    """The hooks a broker API client calls; only the market-timers calls are shown."""

    def __init__(self, account: str):
        self.account = account  # the incident key: one outage per account at a time

    def on_heartbeat_timeout(self, seconds: float) -> None:
        event("heartbeat_lost", key=self.account, text=f"no heartbeat for {seconds:.0f} s")

    def on_disconnected(self, reason: str) -> None:
        event("disconnected", key=self.account, text=reason)

    def on_reconnected(self) -> None:
        event("reconnected", key=self.account)

    def on_order_rejected(self, order_id: str, reason: str) -> None:
        event("rejected", key=order_id, text=f"{self.account}: {reason}")

    def on_order_cancelled(self, order_id: str, by_us: bool) -> None:
        # The system cancels unfilled limit orders after 7 minutes by design: that is not news
        # ([events.severity] cancelled = "digest"); a cancellation by the broker is.
        event("cancelled" if by_us else "cancelled_by_broker", key=order_id)

    def on_fill(self, order_id: str, slippage_bp: float) -> None:
        if slippage_bp > 3:  # counted per session: one alert at the 20th ([[events.count]])
            event("slippage_high", key=order_id, value=slippage_bp)


if __name__ == "__main__":
    if sys.argv[1:] != ["--demo"]:
        print(__doc__)
        sys.exit(0)
    gw = Gateway("real")
    gw.on_heartbeat_timeout(10)
    gw.on_disconnected("connection closed by the broker")
    gw.on_reconnected()
    print("spooled: heartbeat_lost, disconnected, reconnected (one short incident)")
