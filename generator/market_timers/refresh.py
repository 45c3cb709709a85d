"""`market-timers refresh` (market-refresh.timer: daily at 06:00 UTC and once after boot).

A refresh is a `sync` that tells people what changed and what is wrong:

Alerts are spooled, not sent: market-outbox.timer delivers them (the refresh has no network).

* calendar changes: a planned session that disappeared (a new holiday, a closure override) or a
  fire that moved (a new early close). sync has already removed the affected timers without firing
  them (a stop never fires) and started the new ones; here each (calendar, session) gets one
  warning "calendar-changed" alert carrying the diff:
      XNYS 2027-01-09: closed, was a session (signal was due 2027-01-09T20:45:00Z)
      XNYS 2026-12-24: signal moved from 20:45:00Z to 17:45:00Z
* a failing refresh (a bad config edit, an unknown calendar, an exception in exchange_calendars):
  one critical "refresh-failed" alert naming the file and key; nothing is written, so the timers
  already installed keep working.
* a calendar that cannot be planned (exchange_calendars cannot build it, its data has ended):
  only its own jobs are affected; the other calendars are synced, the failed one's installed timers
  are left as they are, and one critical "calendar-failed" alert names the calendar and its jobs.
  The refresh exits 1.
* a calendar's data ends within `[watch] calendar_warn_days` (default 45): a warning naming the
  calendar and its last session, at most once a day per calendar, because no session after it is
  planned; the installed exchange_calendars is getting old (`[watch] calendar_max_age_days`): a
  warning.

`main_from_path(path, now)` loads the config itself, so that a config that does not load still
alerts (through its own [alerts] table, read leniently); the CLI calls it for `refresh`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

from . import config as config_mod
from . import logsetup, metrics
from .errors import ConfigError, Problems
from .exitcodes import FAILURE, USAGE
from .watch_alert import send_alert
from .watch_config import watch_of

log = logging.getLogger("market_timers.watch")

# Calendars whose holidays exchange_calendars keeps as yearly tables (the exchange announces them
# a year at a time): the table's end tells how recent the installed data is.
YEARLY_TABLE_CALENDAR = "XSHG"
WARNED_FILE = "calendar-warned.json"  # in state_dir: calendar -> the day it was last warned about


@dataclass
class RefreshResult:
    ok: bool = True
    exit_code: int = 0
    problems: list[str] = field(default_factory=list)  # why it failed
    diffs: list[tuple[str, str, str]] = field(default_factory=list)  # (calendar, session, text)
    warnings: list[str] = field(default_factory=list)  # calendar age / end
    failures: list = field(default_factory=list)  # plan.CalendarFailure: calendars not planned
    sync: object = None




# entry points ---------------------------------------------------------------------------------

def main_from_path(path: str | Path, now: datetime | None = None, **kw) -> int:
    """`market-timers refresh`: load the config here, so that a broken one alerts too."""
    logsetup.setup()
    try:
        config = config_mod.load(path)
    except ConfigError as e:
        result = RefreshResult(ok=False, problems=e.problems.lines())
        _failed(_lenient_config(path, result.problems), result, now, kw.get("alert", send_alert))
        return USAGE
    return command(config, now, **kw)


def command(config, now: datetime | None = None, *, systemctl=None, alert=send_alert,
            stamp_dir: Path | None = None, data_vintage=None, last_session_of=None) -> int:
    """Refresh with an already loaded config (checked here against the calendars)."""
    logsetup.setup()
    result = run_refresh(config, now, systemctl=systemctl, alert=alert, stamp_dir=stamp_dir,
                         data_vintage=data_vintage, last_session_of=last_session_of)
    if not result.ok:
        return result.exit_code
    for line in result.sync.lines():
        log.info("refresh: %s", line)
    for failure in result.failures:
        log.error("refresh: %s", failure.line())
    return FAILURE if result.failures else 0


def run_refresh(config, now: datetime | None = None, *, systemctl=None, alert=send_alert,
                stamp_dir: Path | None = None, data_vintage=None,
                last_session_of=None) -> RefreshResult:
    from . import calendar_checks
    from . import sync as sync_mod
    from .plan import utcnow

    now = now or utcnow()
    result = RefreshResult()
    problems = Problems(config.source)
    try:
        watch = watch_of(config)
        calendar_checks.check_config(config, problems)
    except ConfigError as e:
        problems.items.extend(e.problems.items)
    except Exception as e:  # exchange_calendars itself broken (import error, bad data)
        problems.add("(calendars)", f"exchange_calendars failed: {type(e).__name__}: {e}")
    if problems:
        result.ok, result.exit_code, result.problems = False, USAGE, problems.lines()
        _failed(config, result, now, alert)
        return result
    try:
        kw = {"stamp_dir": stamp_dir} if stamp_dir is not None else {}
        result.sync = sync_mod.sync(config, now=now, systemctl=systemctl, **kw)
    except Exception as e:
        log.exception("refresh: sync failed")
        result.ok, result.exit_code = False, FAILURE
        result.problems = [f"{config.source}: sync failed: {type(e).__name__}: {e}"]
        _failed(config, result, now, alert)
        return result
    result.diffs = describe_changes(config, result.sync.changes)
    for (cal, session), lines in _grouped(result.diffs).items():
        text = "\n".join(lines)
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        _safe_alert(alert, config, kind="calendar-changed", severity="warning",
                    key=f"calendar-changed:{cal}:{session}:{digest}", session=session,
                    title=f"{cal} {session}: calendar changed", text=text + _removed_note(),
                    now=now)
    result.failures = list(getattr(result.sync, "failures", []))
    for f in result.failures:
        digest = hashlib.sha256(f.reason.encode()).hexdigest()[:10]
        _safe_alert(alert, config, kind="calendar-failed", severity="critical",
                    key=f"calendar-failed:{f.calendar}:{digest}",
                    title=f"calendar {f.calendar} could not be planned",
                    text=_failure_text(f), now=now)
    ending: list[tuple[str, str]] = []
    try:
        ending = calendar_end_warnings(config, now, last_session_of, watch.calendar_warn_days,
                                       skip={f.calendar for f in result.failures})
        age = data_age_warning(now, watch.calendar_max_age_days, data_vintage)
    except Exception as e:  # a warning check must not turn a good refresh into a failed one
        log.warning("refresh: calendar checks failed: %s: %s", type(e).__name__, e)
        age = None
    result.warnings = [text for _, text in ending] + ([age] if age else [])
    for cal, text in ending:  # once a day per calendar, however often the refresh runs
        _safe_alert(alert, config, kind="calendar-stale", severity="warning",
                    key=f"calendar-ends:{cal}:{now.date()}",
                    title=f"exchange calendar {cal}: data ends soon", text=text, now=now,
                    once_a_day=(cal, now.date()))
    if age:
        digest = hashlib.sha256(age.encode()).hexdigest()[:10]
        _safe_alert(alert, config, kind="calendar-stale", severity="warning",
                    key=f"calendar-stale:{digest}", title="exchange calendar data needs an update",
                    text=age, now=now)
    metrics.after_refresh(config, now)
    return result


def _failure_text(f) -> str:
    return (f"{f.line()}\nOnly the jobs of {f.calendar} are affected: the other calendars were "
            f"planned and synced. The timers already installed for {', '.join(f.jobs)} stay as "
            "they are and still fire, but no new session of this calendar is planned until this "
            "is fixed. `market-timers plan` shows the same error.")


def _removed_note() -> str:
    return ("\nThe timers of these fires were stopped and removed without firing; the new ones "
            "(if any) are installed. `market-timers plan` shows the plan.")


# what changed ---------------------------------------------------------------------------------

def _hms(text: str) -> str:
    return text[11:] if len(text) == 20 else text


def describe_changes(config, changes) -> list[tuple[str, str, str]]:
    """(calendar, session, line) for each Change sync reported, worded for people."""
    from . import calendars
    from .plan import _override

    jobs = {j.name: j for j in config.jobs}
    closed: dict[tuple[str, str], list[str]] = defaultdict(list)
    out: list[tuple[str, str, str]] = []
    for c in changes:
        job = jobs.get(c.job)
        cal = getattr(c, "calendar", "") or (
            calendars.resolve(job.calendar) if job and job.calendar else "?")
        if c.new_utc is not None:
            same_day = c.old_utc[:10] == c.new_utc[:10]
            old, new = (_hms(c.old_utc), _hms(c.new_utc)) if same_day else (c.old_utc, c.new_utc)
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} moved from {old} to {new}"))
            continue
        if job is None:
            out.append((cal, c.session, f"{c.session}: {c.job} is no longer in the config "
                                        f"(was due {c.old_utc})"))
            continue
        day = date.fromisoformat(c.session)
        if day in job.skip:
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} skipped by the config "
                                        f"(was due {c.old_utc})"))
            continue
        try:
            is_session = bool(calendars.sessions(cal, day, day, _override(config, cal)))
        except calendars.CalendarError:
            is_session = False
        if not is_session:
            closed[(cal, c.session)].append(f"{c.job} was due {c.old_utc}")
        else:
            out.append((cal, c.session, f"{cal} {c.session}: {c.job} no longer planned "
                                        f"(was due {c.old_utc})"))
    for (cal, session), dues in closed.items():
        out.append((cal, session, f"{cal} {session}: closed, was a session "
                                  f"({'; '.join(dues)})"))
    return sorted(out)


def _grouped(diffs) -> dict[tuple[str, str], list[str]]:
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cal, session, text in diffs:
        groups[(cal, session)].append(text)
    return groups


# how fresh the calendar data is -----------------------------------------------------------------

def calendar_end_warnings(config, now: datetime, last_session_of=None, warn_days: int = 45,
                          skip=frozenset()) -> list[tuple[str, str]]:
    """(calendar, text) for each calendar of the config whose data ends within `warn_days`."""
    from . import calendars

    last_session_of = last_session_of or calendars.last_session
    out = []
    names = sorted({calendars.resolve(j.calendar) for j in config.jobs if j.is_session_job})
    for cal in names:
        if cal in skip:
            continue
        try:
            text = end_warning(cal, last_session_of(cal), now.date(), warn_days)
        except Exception as e:  # one calendar's check must not hide the others' warnings
            log.warning("refresh: cannot tell where %s's data ends: %s: %s", cal,
                        type(e).__name__, e)
            continue
        if text:
            out.append((cal, text))
    return out


def end_warning(cal: str, last: date | None, today: date, warn_days: int) -> str | None:
    """The warning for a calendar whose last session is `last` (None: no end), or None. Shared
    with `status`."""
    if last is None or warn_days <= 0 or (last - today).days > warn_days:
        return None
    from . import calendars

    when = "has passed" if last < today else f"is in {(last - today).days} day(s)"
    return (f"calendar {cal}: the installed exchange_calendars {calendars.version()} has "
            f"sessions up to {last} only; its last session {when} ([watch] calendar_warn_days = "
            f"{warn_days}). No session after it is planned, so its jobs stop running then. "
            "Upgrade the market-timers package (a newer exchange_calendars) before that day.")


def data_vintage() -> tuple[date, str] | None:
    """(about when the installed exchange_calendars data was made, how we know) or None.

    The package's files carry no release date (their mtimes are the install time). What it does
    carry are holiday tables kept a year at a time, for exchanges that announce holidays yearly:
    a release that knows XSHG's holidays up to 31 December of year Y was made once they were
    announced, around December of Y-1. That is the estimate; the end of the table is the
    calendar's public bound (calendars.data_limits).
    """
    from . import calendars

    try:
        end = calendars.data_limits(YEARLY_TABLE_CALENDAR)[1]
    except Exception:  # exchange_calendars broken or the calendar gone: say nothing wrong
        return None
    if end is None:
        return None
    return date(end.year - 1, 12, 1), (f"exchange_calendars {calendars.version()} knows "
                                       f"{YEARLY_TABLE_CALENDAR} holidays up to {end}")


def data_age_warning(now: datetime, max_age_days: int, vintage=None) -> str | None:
    if max_age_days <= 0:
        return None
    found = vintage if vintage is not None else data_vintage()
    if not found:
        log.info("refresh: cannot tell how old the installed exchange_calendars is")
        return None
    made, how = found
    age = (now.date() - made).days
    if age <= max_age_days:
        return None
    return (f"the installed exchange calendar data is about {age} days old ({how}, so it dates "
            f"from about {made:%Y-%m}), more than [watch] calendar_max_age_days = "
            f"{max_age_days}: closures announced since (a national day of mourning, a new "
            "holiday) are not known to it. Upgrade the market-timers package, or add them to "
            "[overrides.<calendar>] closed = [...] meanwhile.")


# failures -------------------------------------------------------------------------------------

def _failed(config, result: RefreshResult, now, alert) -> None:
    lines = result.problems or ["unknown failure"]
    for line in lines:
        log.error("refresh: %s", line)
    text = ("market-timers refresh failed; nothing was changed: the timers already installed "
            "stay as they are and still fire, but no new session is planned until this is "
            "fixed.\n" + "\n".join(lines))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:10]
    _safe_alert(alert, config, kind="refresh-failed", severity="critical",
                key=f"refresh-failed:{digest}", title="market-timers refresh failed", text=text,
                now=now)


def _safe_alert(alert, config, *, once_a_day: tuple[str, date] | None = None, **kw) -> None:
    """Spool the alert; market-outbox.timer delivers it within a minute. The refresh itself never
    touches the network, so its unit runs with PrivateNetwork=yes. `once_a_day` = (what, day):
    raised only by the first refresh of that day (the refresh also runs after each boot)."""
    def raise_it() -> None:
        try:
            if once_a_day is not None and not _first_today(config, *once_a_day):
                return
            alert(config, deliver=False, **kw)
        except Exception:
            log.exception("refresh: could not raise the %s alert", kw.get("kind"))

    if alert is send_alert and _drop_to(config) is not None:
        _as_user(config, raise_it)
    else:
        raise_it()


def _first_today(config, what: str, day: date) -> bool:
    """True (and remembered in state_dir) unless `what` was already warned about on `day`. Runs as
    the package user when the refresh runs as root; the file is never followed through a
    symlink (the state dir is the package user's)."""
    import json

    from market_timers import atomicfile  # absolute: this module is moving into watch/

    path = Path(config.state_dir) / WARNED_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            seen = json.loads(f.read() or b"{}")
        if not isinstance(seen, dict):
            seen = {}
    except FileNotFoundError:
        seen = {}
    except (OSError, ValueError) as e:  # unreadable or garbage: warn rather than stay silent
        log.warning("refresh: cannot read %s (%s): warning again", path, e)
        seen = {}
    if seen.get(what) == day.isoformat():
        return False
    seen[what] = day.isoformat()
    try:  # NONE (no fsync): a note lost at a power cut repeats a warning, the safe side
        atomicfile.write(path, json.dumps(seen, sort_keys=True), mode=0o644,
                         sync=atomicfile.NONE, make_dirs=True)
    except OSError as e:  # cannot remember: the warning may repeat, which is the safe side
        log.warning("refresh: cannot write %s: %s", path, e)
    return True


def _drop_to(config):
    """The refresh runs as root (it writes /etc/systemd/system); the alert layer's state and spool
    belong to the package user, who must be able to read and rewrite them afterwards."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(config.user)
    except (KeyError, TypeError):
        return None


def _as_user(config, fn) -> None:
    pw = _drop_to(config)
    pid = os.fork()
    if pid == 0:  # child: become the package user, raise the alert, leave
        code = 1
        try:
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            fn()
            code = 0
        except BaseException:
            log.exception("refresh: could not raise an alert as %s", config.user)
        finally:
            logging.shutdown()
            os._exit(code)
    os.waitpid(pid, 0)


def _lenient_config(path, problems=()) -> config_mod.Config:
    """Enough of a broken config to route its alert: the last good snapshot of what alerting
    needs (alerts/snapshot.py), else the file's own [alerts], state and spool dirs."""
    from .alerts import snapshot

    try:
        return snapshot.degraded(path, tuple(problems))
    except Exception:  # unreadable or not TOML: defaults (the alert is at least spooled)
        log.exception("refresh: cannot read even part of %s", path)
        return config_mod.Config(source=str(path))

