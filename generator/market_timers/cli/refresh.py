"""`market-timers refresh` (market-refresh.timer: daily at 06:00 UTC and once after boot).

A refresh is a `sync` that tells people what changed and what is wrong. Alerts are spooled, not
sent: market-outbox.timer delivers them (the refresh has no network).

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

Here: the flow, its failures and how it raises alerts (as the package user, privileges.run_as).
The wording of the changes: changes.py; the calendar data warnings: calendar_warnings.py; once a
day: oncedaily.py.

`main_from_path(path, now)` loads the config itself, so that a config that does not load still
alerts (through its own [alerts] table, read leniently); the CLI calls it for `refresh`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

from market_timers import metrics
from market_timers.alerts import snapshot
from market_timers.alerts.privileges import run_as
from market_timers.cli.synced import after_sync
from market_timers.config import loader as config_mod
from market_timers.config.watch import watch_of
from market_timers.contracts import environment, journal
from market_timers.contracts.exitcodes import FAILURE, USAGE
from market_timers.host.clock import utcnow
from market_timers.schedule import calendar_checks
from market_timers.schedule import sync as sync_mod
from market_timers.schema.problems import ConfigError, Problems
from market_timers.watch.alert import send_alert
from market_timers.watch.calendar_warnings import calendar_end_warnings, data_age_warning
from market_timers.watch.changes import describe_changes, grouped
from market_timers.watch.oncedaily import first_today

log = logging.getLogger("market_timers.watch")


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
    journal.setup()
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
    journal.setup()
    result = run_refresh(config, now, systemctl=systemctl, alert=alert, stamp_dir=stamp_dir,
                         data_vintage=data_vintage, last_session_of=last_session_of)
    if not result.ok:
        return result.exit_code
    for line in result.sync.lines():
        (log.warning if line.startswith("warning: ") else log.info)("refresh: %s", line)
    for failure in result.failures:
        log.error("refresh: %s", failure.line())
    return FAILURE if result.failures else 0


def run_refresh(config, now: datetime | None = None, *, systemctl=None, alert=send_alert,
                stamp_dir: Path | None = None, data_vintage=None,
                last_session_of=None) -> RefreshResult:
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
        after_sync(config, now)
    except Exception as e:
        log.exception("refresh: sync failed")
        result.ok, result.exit_code = False, FAILURE
        result.problems = [f"{config.source}: sync failed: {type(e).__name__}: {e}"]
        _failed(config, result, now, alert)
        return result
    _alert_changes(config, result, now, alert)
    _warn_of_calendar_data(config, result, watch, now, alert, last_session_of, data_vintage)
    metrics.after_refresh(config, now)
    return result


def _alert_changes(config, result: RefreshResult, now: datetime, alert) -> None:
    """A warning for each session whose fires the calendar moved, a critical for each calendar
    that could not be planned."""
    result.diffs = describe_changes(config, result.sync.changes)
    for (cal, session), lines in grouped(result.diffs).items():
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


def _warn_of_calendar_data(config, result: RefreshResult, watch, now: datetime, alert,
                           last_session_of, data_vintage) -> None:
    """Warnings that a calendar's data ends soon, or that the installed data is old."""
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


def _failure_text(f) -> str:
    return (f"{f.line()}\nOnly the jobs of {f.calendar} are affected: the other calendars were "
            f"planned and synced. The timers already installed for {', '.join(f.jobs)} stay as "
            "they are and still fire, but no new session of this calendar is planned until this "
            "is fixed. `market-timers plan` shows the same error.")


def _removed_note() -> str:
    return ("\nThe timers of these fires were stopped and removed without firing; the new ones "
            "(if any) are installed. `market-timers plan` shows the plan.")


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
            if once_a_day is not None and not first_today(config, *once_a_day):
                return
            alert(config, deliver=False, **kw)
        except Exception:
            log.exception("refresh: could not raise the %s alert", kw.get("kind"))

    pw = _drop_to(config) if alert is send_alert else None
    if pw is None:
        raise_it()
        return

    def failed(e: BaseException) -> None:
        log.exception("refresh: could not raise an alert as %s", environment.PACKAGE_USER)

    run_as(pw.pw_uid, pw.pw_gid, raise_it, on_error=failed)


def _drop_to(config):
    """The refresh runs as root (it writes /etc/systemd/system); the alert layer's state and spool
    belong to the package user, who must be able to read and rewrite them afterwards (the fixed
    PACKAGE_USER: the config's `user` is the jobs')."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(environment.PACKAGE_USER)
    except (KeyError, TypeError):
        return None


def _lenient_config(path, problems=()) -> config_mod.Config:
    """Enough of a broken config to route its alert: the last good snapshot of what alerting
    needs (alerts/snapshot.py), else the file's own [alerts], state and spool dirs."""
    try:
        return snapshot.degraded(path, tuple(problems))
    except Exception:  # unreadable or not TOML: defaults (the alert is at least spooled)
        log.exception("refresh: cannot read even part of %s", path)
        return config_mod.Config(source=str(path))

