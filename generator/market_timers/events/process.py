"""The events processor (market-events.service, started by market-events.path when an event is
spooled and every minute by market-events.timer) and the `incidents` / `event` commands.

A pass takes the processor's lock and reads every spooled event (a file that is not a valid
event is moved to `events.bad/` beside the spool and raises one warning per pass). Critical
events that no stateful rule (expected, incident, count) orders go first, with the events of a
critical incident rule that alerts at once; the others follow in arrival order (file name), each ticking the clock up to its instant (incidents whose
`interrupt_after` passed before it alert at that moment). Events are routed in batches of
`BATCH`: after each, the state is saved durably, only then are the batch's files removed, and its
alerts delivered, while the rest of a flood is still spooled. A crash before a batch's save
reprocesses that batch once more (the dedup window holds its alerts back); after it, a file not
yet removed is skipped: its id is remembered (store.seen).

While an open incident's threshold falls within `WAIT_MAX` seconds, the service stays up and
polls the spool every second, so that alert leaves when the threshold passes, not a minute later;
after an event it lingers `LINGER` seconds (polling every `POLL`), so a burst is one start.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from market_timers.alerts.api import raise_alert
from market_timers.alerts.context import context_from
from market_timers.config.events import EventsConfig
from market_timers.contracts import journal
from market_timers.events import spool
from market_timers.events.engine import Engine, ms
from market_timers.events.intake import pending, read_event, read_ready, set_aside, sweep_temp
from market_timers.events.plan_lookup import PlanLookup, parse_at
from market_timers.events.store import Store, read_open

log = logging.getLogger("market_timers.events")
WAIT_MAX = 60.0
# After routing an event the service stays LINGER s polling every POLL s: a burst of events from a
# gateway is one service start, not one per event (and systemd's start limit is never near).
LINGER = 3.0
POLL = 0.2
MAX_RUN = 240.0  # one pass ends before market-events.service's TimeoutStartSec= (300 s)
TICK = timedelta(milliseconds=1)
# Events routed between two durable saves of the state: the batch's files are removed after the
# save and its alerts delivered then, while the rest of a flood is still spooled.
BATCH = 200


def spool_dirs(config) -> list[str]:
    return spool.config_directories(str(config.spool_dir), str(config.runtime_dir))


def _alert_bad(ctx, bad: list[tuple[Path, str, str]]) -> None:
    """One warning per pass for every file set aside in it, however many."""
    if not bad:
        return
    lines = [f"{p.name}: {reason} -> {where}" for p, reason, where in bad[:20]]
    more = f"\n… and {len(bad) - 20} more" if len(bad) > 20 else ""
    raise_alert(ctx, kind="event", key=f"bad-events:{bad[0][0].name}", severity="warning",
                title=f"{len(bad)} malformed event file(s) set aside",
                text=(f"{len(bad)} spooled file(s) were not valid events and were not routed; "
                      "the other events were.\n" + "\n".join(lines) + more))


def _alert_refused(ctx, refused: list[tuple[Path, str, str, str]]) -> None:
    """One warning per pass for the events of writers `writers` does not name, apart from the
    malformed files: its key is the writers', so the same writers again fold into it (told
    once, in the dedup window) while new ones are told."""
    if not refused:
        return
    counts: dict[str, int] = {}
    for _, who, _, _ in refused:
        counts[who] = counts.get(who, 0) + 1
    whom = ", ".join(f"{n} from {who}" for who, n in sorted(counts.items()))
    lines = [f"{p.name}: {reason} -> {where}" for p, _, reason, where in refused[:20]]
    more = f"\n… and {len(refused) - 20} more" if len(refused) > 20 else ""
    title = f"events from an unexpected writer refused: {whom}"
    raise_alert(ctx, kind="event", key="refused-writers:" + ",".join(sorted(counts)),
                severity="warning", title=title,
                text=(f"{title}. They were set aside, never routed ([events] writers and the "
                      "incident rules' writers name who may send them).\n" + "\n".join(lines)
                      + more))


def drain(ctx, ecfg: EventsConfig, state_dir, dirs: list[str], now: datetime,
          schedule: PlanLookup | None = None, calendar: str | None = None,
          override=None) -> Engine:
    """Route every spooled event, then tick to `now`. Returns the engine (outcomes, deadlines).
    `calendar` (and its `override`): the exchange calendar whose sessions events belong to."""
    store = Store(state_dir)
    with store.locked():
        files = pending(dirs)
        if schedule is None:  # plan.json and run records: read only when there is an event
            schedule = PlanLookup.from_state(state_dir, {r.after_job for r in ecfg.expected},
                                             calendar, override) if files else PlanLookup()
        engine = Engine(ctx, ecfg, store, schedule)
        ready, bad, refused = read_ready(store, files, now, ecfg)
        _route(engine, store, ecfg, ready, now, bad)
        _tick_until(engine, now)
        engine.summarise_floods(now)
        store.save()
        engine.flood.save()
    _alert_bad(ctx, bad)
    _alert_refused(ctx, refused)
    engine.deliver()
    sweep_temp(dirs, time.time())
    return engine


def _route(engine: Engine, store: Store, ecfg: EventsConfig, ready: list[tuple[Path, dict]],
           now: datetime, bad: list[tuple[Path, str, str]]) -> None:
    """Route the events in batches (the queue-jumping criticals first): after each batch the
    state is saved durably, then its files go, then its alerts leave."""
    first: list[tuple[Path, dict]] = []
    rest: list[tuple[Path, dict]] = []
    for r in ready:
        (first if _jumps_the_queue(ecfg, r[1]) else rest).append(r)
    batches = [(True, first[i:i + BATCH]) for i in range(0, len(first), BATCH)] + \
        [(False, rest[i:i + BATCH]) for i in range(0, len(rest), BATCH)]
    for jumped, batch in batches:
        done: list[Path] = []
        for path, event in batch:
            try:  # one event's failure (a bug) never stops the pass: it is set aside
                if not jumped:  # a critical routed first does not move the clock on
                    _tick_until(engine, min(parse_at(event["at"]), now))
                engine.handle(event)
            except Exception as e:
                log.exception("events: routing %s failed", path.name)
                reason = f"the processor failed on it ({type(e).__name__}: {e})"
                bad.append((path, reason, set_aside(path, reason)))
                continue
            store.mark_seen(event["id"])
            done.append(path)
        if done:
            store.save()
            engine.flood.save()
            for p in done:
                p.unlink(missing_ok=True)
            engine.deliver()


def events_calendar(config) -> str | None:
    """The calendar of the events' sessions: the config's `calendar`, else its first session
    job's (None: no calendar, the plan's fires decide)."""
    jobs = getattr(config, "jobs", None) or ()
    return getattr(config, "calendar", None) or next(
        (j.calendar for j in jobs if getattr(j, "is_session_job", False)), None)


def _jumps_the_queue(ecfg: EventsConfig, event: dict) -> bool:
    """A critical event that no stateful rule (expected, incident, count) orders, or an event of
    a critical incident rule that alerts as it opens (all of its events, in their order): it is
    routed before the others of the pass, so a flood ahead of it does not delay it."""
    kind = event["kind"]
    rule = ecfg.incident_for(kind)
    if rule is not None:
        return rule.severity == "critical" and rule.interrupt_after == 0
    if any(r.kind == kind for r in ecfg.expected) or ecfg.count_for(kind) is not None:
        return False
    severity = ecfg.severity.get(kind) or event.get("severity") or ecfg.default_severity
    return severity == "critical"


def _tick_until(engine: Engine, t: datetime) -> None:
    """Tick at each threshold that passed before `t` (an alert's time is its threshold's)."""
    while (due := engine.next_deadline()) is not None and due + TICK <= t:
        if not engine.tick(due + TICK):
            break
    engine.tick(t)


# commands ----------------------------------------------------------------------------------------

def process(config, now=None, wait_max: float = WAIT_MAX, sleep=time.sleep, clock=None,
            monotonic=time.monotonic) -> int:
    """`market-timers incidents process`: drain, then wait for thresholds due within wait_max.

    `now` (--now) runs one pass at that instant; `clock`/`sleep`/`monotonic` are for tests."""
    journal.setup()
    if clock is None:
        clock = (lambda: now) if now is not None else (lambda: datetime.now(UTC))
    ctx = context_from(config, now=clock)
    ecfg = getattr(config, "events", None) or EventsConfig()
    dirs = spool_dirs(config)
    calendar = events_calendar(config)
    override = (getattr(config, "overrides", None) or {}).get(calendar)
    last_event = clock()
    started = monotonic()
    loaded = _config_stamp(config)
    while True:
        if _config_stamp(config) != loaded:  # the path unit's next pass reads the new rules
            log.info("events: the config changed during this pass: it ends, the next reads it")
            return 0
        t = clock()
        engine = drain(ctx, ecfg, config.state_dir, dirs, t, calendar=calendar,
                       override=override)
        for outcome, what in engine.outcomes:
            log.info("event %s: %s", what, outcome)
        if now is not None:
            return 0
        if engine.outcomes:
            last_event = t
        due = engine.next_deadline()
        lingering = (t - last_event).total_seconds() < LINGER
        waiting = due is not None and (due - t).total_seconds() <= wait_max
        if (not lingering and not waiting) or monotonic() - started > MAX_RUN:
            return 0  # market-events.path starts a fresh pass if events are still there
        pause = POLL if lingering else 1.0
        if waiting:
            pause = min(pause, max((due - t).total_seconds(), 0) + 0.01)
        sleep(pause)


def _config_stamp(config) -> int | None:
    """The config file's mtime: a pass routes only under the rules it loaded, so one that polls
    on past an edit (a sync) would route the next events under the old ones."""
    try:
        return os.stat(config.source).st_mtime_ns
    except (OSError, TypeError, AttributeError):
        return None


def incidents_list(config, as_json: bool = False, now=None) -> int:
    """`market-timers incidents [--json]`: the open incidents."""
    rows = read_open(config.state_dir)
    now = now or datetime.now(UTC)
    for r in rows:
        r["open_sec"] = round((now - parse_at(r["opened"])).total_seconds(), 1)
    if as_json:
        print(json.dumps(rows, indent=1, sort_keys=True))
        return 0
    if not rows:
        print("no open incident")
        return 0
    for r in rows:
        alerted = f"alerted ({r['alert_id']})" if r.get("alerted") else \
            r.get("handling") or f"alerts after {r['deadline'][11:19]}Z if still open"
        print(f"{r['session']}  {r['rule']} {r['key']}  opened {r['opened'][:19]}Z "
              f"({r['open_sec']:.0f} s ago)  events {r['count']}  {alerted}  id {r['id']}")
    return 0


__all__ = ["drain", "process", "incidents_list", "ms", "pending", "read_event"]
