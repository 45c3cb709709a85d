"""The seed's four months of events (002, "Fatiga de alertas"), rebuilt from its published facts.

Facts (issue 13): XNYS, 2025-09-02..2025-12-31, 85 sessions; 92 `disconnected` (85 are the
end-of-session disconnect job's own, 7 are cuts by the broker), 50 `cancelled` (limit orders the
system cancels itself after 7 minutes), 7 `heartbeat_lost`, 7 `reconnected`, 2 `rejected`
(P00005 on paper, R00007 live, "insufficient buying power"). The 7 cuts lasted 42, 92, 137, 72,
117, 57 and 107 s, on 2025-09-23, 10-21, 11-03, 11-13, 12-03, 12-09 and 12-15, all on the live
account. 158 events: a naive rule alerts on each.

Not in the facts, chosen here and kept plain: the time of day of each cut (spread over the
session), that a cut's lost heartbeat is noticed at the same instant as the broker's close (the
seed measures a cut from the close to the reconnect), when the 50 cancellations fall (one
session in about 1.7, 8 min after the open: opening order at +1 min, cancelled 7 min later),
the two rejection dates, and that the gateway sends the end-of-session `disconnected` 3 s after
the disconnect job's planned instant (close + 5 min in the example config).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

CUTS = {date(2025, 9, 23): 42, date(2025, 10, 21): 92, date(2025, 11, 3): 137,
        date(2025, 11, 13): 72, date(2025, 12, 3): 117, date(2025, 12, 9): 57,
        date(2025, 12, 15): 107}
REJECTIONS = {date(2025, 10, 8): ("P00005", "paper"), date(2025, 11, 19): ("R00007", "real")}
START, END = date(2025, 9, 2), date(2025, 12, 31)


def z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def build(fires) -> list[dict]:
    """The stream, in time order, from the plan's fires (plan.plan_between of the example)."""
    by_job: dict[str, dict[date, datetime]] = {}
    for f in fires:
        by_job.setdefault(f.job, {})[f.session] = f.fire_utc
    disconnect, opening = by_job["disconnect"], by_job["opening-orders"]
    sessions = sorted(disconnect)
    events: list[dict] = []
    for i, session in enumerate(sessions):
        events.append({"at": z(disconnect[session] + timedelta(seconds=3)),
                       "kind": "disconnected", "key": "real",
                       "text": "end of session: disconnected by the disconnect job"})
        if session in CUTS:
            cut = opening[session] + timedelta(hours=2, minutes=7 * (i % 5), seconds=11)
            for kind in ("heartbeat_lost", "disconnected"):
                events.append({"at": z(cut), "kind": kind, "key": "real",
                               "text": "connection closed by the broker"
                               if kind == "disconnected" else "no heartbeat for 10 s"})
            events.append({"at": z(cut + timedelta(seconds=CUTS[session])), "kind": "reconnected",
                           "key": "real", "text": "session restored"})
        if session in REJECTIONS:
            order, mode = REJECTIONS[session]
            events.append({"at": z(opening[session] + timedelta(seconds=2)), "kind": "rejected",
                           "key": order, "text": f"{mode}: insufficient buying power"})
    n = 0
    for i, session in enumerate(sessions):  # 50 cancellations spread over the 85 sessions
        if n < 50 and (i * 50) // 85 == n:
            n += 1
            events.append({"at": z(opening[session] + timedelta(minutes=7)), "kind": "cancelled",
                           "key": f"R{n:05d}", "text": "limit order cancelled after 7 min"})
    events.sort(key=lambda e: e["at"])
    return events
