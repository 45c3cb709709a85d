"""The events processor (market-events.service, started by market-events.path when an event is
spooled and every minute by market-events.timer) and the `incidents` / `event` commands.

A pass takes the processor's lock and reads every spooled event (a file that is not a valid
event is moved to `events.bad/` beside the spool and raises one warning per pass). Critical
events that no stateful rule (expected, incident, count) orders go first; the others follow in
arrival order (file name), each ticking the clock up to its instant (incidents whose
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

import contextlib
import json
import logging
import os
import stat
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from market_timers.alerts.api import raise_alert
from market_timers.config.events import KIND, EventsConfig
from market_timers.events import spool
from market_timers.events.engine import Engine, ms
from market_timers.events.plan_lookup import PlanLookup, parse_at
from market_timers.events.store import Store, read_open

log = logging.getLogger("market_timers.events")
MAX_FILE = 64 * 1024
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
STALE_TEMP = 60  # seconds


def spool_dirs(config) -> list[str]:
    return spool.config_directories(str(config.spool_dir), str(config.runtime_dir))


def pending(dirs: list[str]) -> list[Path]:
    """Spooled event files of every directory, in arrival order (their names)."""
    files = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        files += [Path(d) / n for n in names if n.endswith(".json") and not n.startswith(".")]
    return sorted(files, key=lambda p: p.name)


# What a spooled event may hold: anything else is set aside, never routed, so that no file can
# stop the pass (a year-1 `at` overflowed the clock arithmetic, a 400-digit value the float
# conversion, deep nesting the JSON parser's recursion, a 300-character session the file names).
# An event older than this at its arrival is refused: years are fine (a replay of a past stream
# through `market-timers event --now`), year 1 is not.
MAX_PAST = timedelta(days=3660)
MAX_FUTURE = timedelta(minutes=5)  # clock skew allowed; later is clamped to the arrival
MAX_FIELD = {"kind": 40, "key": spool.MAX_KEY, "text": spool.MAX_TEXT + 1, "job": 64,
             "session": 10, "severity": 10}
MAX_VALUE = 1e15
MAX_BAD = 1000  # files kept in events.bad/; beyond, a bad file is deleted (and still counted)


def read_event(path: Path, now: datetime | None = None) -> dict:
    """The event in `path`, checked field by field; ValueError naming what is wrong with it.

    `now` (the pass's instant) bounds its time: older than MAX_PAST is refused; later than
    now + MAX_FUTURE (a gateway's clock ahead) is clamped to its arrival, the file's mtime, and
    the event says so (`clamped_from`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MAX_FILE:
            raise ValueError(f"larger than {MAX_FILE} bytes")
        data = os.read(fd, MAX_FILE + 1)
    finally:
        os.close(fd)
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's
        raise ValueError("not valid JSON (or nested too deeply)") from None
    if not isinstance(event, dict) or not KIND.match(str(event.get("kind", ""))):
        raise ValueError("no valid kind")
    for key, limit in MAX_FIELD.items():
        value = event.get(key, "")
        if value is None and key == "severity":
            continue
        if not isinstance(value, str):
            raise ValueError(f"{key} is not a string")
        if len(value) > limit:
            raise ValueError(f"{key} is longer than {limit} characters")
    if event.get("severity") not in ("", None, *spool.SEVERITIES):
        raise ValueError("bad severity")
    if event.get("session") and not _is_date(event["session"]):
        raise ValueError(f"session {event['session']!r} is not a YYYY-MM-DD date")
    value = event.get("value")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("value is not a number")
        try:
            finite = abs(float(value)) <= MAX_VALUE
        except OverflowError:
            finite = False
        if not finite:
            raise ValueError(f"value is not a finite number within ±{MAX_VALUE:g}")
    try:
        at = parse_at(event.get("at", ""))
    except (TypeError, ValueError) as e:
        raise ValueError(f"at is not an instant ({e})") from None
    if now is not None:
        arrival = min(datetime.fromtimestamp(st.st_mtime, UTC), now)
        if at < arrival - MAX_PAST:
            raise ValueError(f"at {event['at']} is more than {MAX_PAST.days // 366} years before "
                             "it was spooled")
        if at > now + MAX_FUTURE:
            event["clamped_from"] = event["at"]
            event["at"] = arrival.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return event


def _is_date(text: str) -> bool:
    try:
        return len(text) == 10 and bool(date.fromisoformat(text))
    except ValueError:
        return False


def _set_aside(path: Path, reason: str) -> str:
    """Move a bad file to the sibling `events.bad/` (kept for a look, at most MAX_BAD files; out
    of the path unit's watched directory, so it does not start the processor again and again).
    Returns where it went."""
    target = path.parent.with_name(path.parent.name + ".bad") / path.name
    try:
        target.parent.mkdir(mode=0o750, exist_ok=True)
        if len(os.listdir(target.parent)) >= MAX_BAD:
            raise OSError(f"{target.parent} already holds {MAX_BAD} files")
        os.rename(path, target)
        where = str(target)
    except OSError as e:
        with contextlib.suppress(OSError):
            path.unlink()
        where = f"deleted ({e.strerror or e})"
    log.error("events: %s set aside: %s", path, reason)
    return where


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


def _sweep_temp(dirs: list[str], now: float) -> None:
    """Remove the temp file of a writer that died mid-write (a write takes milliseconds)."""
    for d in dirs:
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                if name.startswith(".") and name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        if now - os.lstat(os.path.join(d, name)).st_mtime > STALE_TEMP:
                            os.unlink(os.path.join(d, name))


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
        bad: list[tuple[Path, str, str]] = []
        ready: list[tuple[Path, dict]] = []
        for path in files:
            event_id = path.name.removesuffix(".json")
            if store.seen(event_id):
                path.unlink(missing_ok=True)
                continue
            try:
                event = read_event(path, now)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                reason = getattr(e, "strerror", None) or str(e)
                bad.append((path, reason, _set_aside(path, reason)))
                continue
            if "clamped_from" in event:
                log.warning("events: %s is dated %s, ahead of this host's clock: taken as spooled "
                            "at %s", path.name, event["clamped_from"], event["at"])
            event["id"] = event_id
            ready.append((path, event))
        first: list[tuple[Path, dict]] = []
        rest: list[tuple[Path, dict]] = []
        for r in ready:
            (first if _jumps_the_queue(ecfg, r[1]) else rest).append(r)
        done: list[Path] = []

        def flush() -> None:
            """Durable state, then the batch's files go, then its alerts leave."""
            store.save()
            for p in done:
                p.unlink(missing_ok=True)
            done.clear()
            engine.deliver()

        batches = [(True, first[i:i + BATCH]) for i in range(0, len(first), BATCH)] + \
            [(False, rest[i:i + BATCH]) for i in range(0, len(rest), BATCH)]
        for jumped, batch in batches:
            for path, event in batch:
                try:  # one event's failure (a bug) never stops the pass: it is set aside
                    if not jumped:  # a critical routed first does not move the clock on
                        _tick_until(engine, min(parse_at(event["at"]), now))
                    engine.handle(event)
                except Exception as e:
                    log.exception("events: routing %s failed", path.name)
                    reason = f"the processor failed on it ({type(e).__name__}: {e})"
                    bad.append((path, reason, _set_aside(path, reason)))
                    continue
                store.mark_seen(event["id"])
                done.append(path)
            if done:
                flush()
        _tick_until(engine, now)
        store.save()
    _alert_bad(ctx, bad)
    engine.deliver()
    _sweep_temp(dirs, time.time())
    return engine


def events_calendar(config) -> str | None:
    """The calendar of the events' sessions: the config's `calendar`, else its first session
    job's (None: no calendar, the plan's fires decide)."""
    jobs = getattr(config, "jobs", None) or ()
    return getattr(config, "calendar", None) or next(
        (j.calendar for j in jobs if getattr(j, "is_session_job", False)), None)


def _jumps_the_queue(ecfg: EventsConfig, event: dict) -> bool:
    """A critical event that no stateful rule (expected, incident, count) orders: it is routed
    before the others of the pass, so a flood ahead of it does not delay it."""
    kind = event["kind"]
    if (any(r.kind == kind for r in ecfg.expected) or ecfg.incident_for(kind) is not None
            or ecfg.count_for(kind) is not None):
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
    from market_timers.alerts.context import context_from
    from market_timers.contracts import journal

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
    while True:
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


__all__ = ["drain", "process", "incidents_list", "ms"]
