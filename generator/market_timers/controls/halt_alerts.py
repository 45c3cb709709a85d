"""The halt alert policy: a halt's alert (critical) and its lifting's (warning), each one incident
told on every configured channel at once, raised once the halt's own work is done (cli/ composes
it with halt.py and resume.py, which send none). A halt's alert id is made from the halt (scope,
name, since): one id on every channel, one `ack`; lifting the halt resolves that incident (its
repeats stop on every channel) and its message names the id resolved."""

from __future__ import annotations

import os
import sys
import traceback

from market_timers.contracts import environment


def _package_user_exists() -> bool:
    import pwd

    try:
        pwd.getpwnam(environment.PACKAGE_USER)
    except KeyError:
        return False
    return True


def _resolve_lifted(config, key_prefixes: list[str]) -> None:
    """The lifted halts' incidents are over: their HALT alerts stop repeating on every channel."""
    from market_timers.alerts.api import resolve_incident

    for prefix in key_prefixes:
        resolve_incident(config, prefix)


def _channels(config) -> list[str]:
    alerts = getattr(config, "alerts", None)
    return alerts.configured() if alerts is not None and alerts.enabled else []


def halt_alert_id(incident: str, since) -> str | None:
    """The HALT alert's id, the same for every channel and known again at `resume`."""
    from market_timers.alerts.model import make_id, parse_iso

    try:
        made = parse_iso(since) if isinstance(since, str) else None
    except ValueError:
        made = None
    return make_id("halt", f"halt:{incident}", made) if made is not None else None


def halt_alerts(config, lifted: bool = False) -> HaltAnnouncer:
    """A halt's alert (critical) or its lifting's (warning), to every configured channel.
    announce(...) collects them; announce.send() raises them once the halt's own work (as root)
    is done."""
    return HaltAnnouncer(config, lifted)


class HaltAnnouncer:
    """Collects a halt's alerts, then raises them in a child that becomes the package's user as
    the alert path does (its outbox, the channels' credentials)."""

    def __init__(self, config, lifted: bool) -> None:
        self.config, self.lifted = config, lifted
        self.pending: list[dict] = []
        self.resolving: list[str] = []  # key prefixes of the halts lifted

    def __call__(self, record: dict, stopped=(), on_halt_unit=None) -> None:
        what, by, host = record["what"], record.get("by", "?"), record.get("host", "?")
        if self.lifted:
            title = f"halt lifted: {what} may start again (halted by {by} on {host}: " \
                    f"{record.get('reason', '')})"
        else:
            title = f"HALT: {what} halted by {by} on {host}: {record.get('reason', '')}"
        details = {"scope": what, "by": by, "host": host, "since": record.get("since"),
                   "reason": record.get("reason"), "resume": record.get("resume"),
                   **({"stopped": ", ".join(stopped)} if stopped else {}),
                   **({"on_halt": on_halt_unit} if on_halt_unit else {})}
        kind = "halt-lifted" if self.lifted else "halt"
        incident = f"{record['scope']}:{record.get('name') or ''}:{record.get('since')}:"
        halt_id = halt_alert_id(incident, record.get("since"))
        self.resolving.extend([f"halt:{incident}"] if self.lifted else [])  # resume ends the HALT's
        text = title + (f"\n\nThe HALT alert {halt_id} is resolved: no more repeats of it."
                        if self.lifted else "")
        self.pending.append(dict(
            kind=kind, severity="warning" if self.lifted else "critical", key=f"{kind}:{incident}",
            title=title, text=text, details=details, chain=_channels(self.config) or None,
            every_channel=True, alert_id=None if self.lifted else halt_id))

    def on_halt_failed(self, record: dict, session: str, what: str) -> None:
        """on_halt's critical alert when its unit's failure handler cannot raise it (it could
        not be started; a clean signal): the incident its handler's would be (job on_halt)."""
        title = f"on_halt {what} (the halt of {record['what']} by {record.get('by', '?')} on " \
                f"{record.get('host', '?')}: {record.get('reason', '')})"
        self.pending.append(dict(
            kind="failed", job="on_halt", session=session, severity="critical", title=title,
            text=title, details={"scope": record["what"], "since": record.get("since"),
                                 "on_halt": what, "resume": record.get("resume")}))

    def send(self) -> None:
        """Raise what is pending, once: `halt` sends its alert before it waits for on_halt, the
        command line then sends what came after (on_halt's own failure)."""
        try:
            self._send_now()
        finally:
            self.pending.clear()
            self.resolving.clear()

    def _send_now(self) -> None:
        from market_timers.alerts.api import raise_alert  # at the call: tests substitute it

        if not self.pending:
            return
        if os.geteuid() != 0 or not _package_user_exists():
            _resolve_lifted(self.config, self.resolving)
            for kw in self.pending:  # as we are (an operator; a machine without the package's user)
                if raise_alert(self.config, **kw) is None and kw.get("chain"):
                    print(f"market-timers: the alert {kw['title']!r} could not be spooled as "
                          "this user (the outbox is the package's user's): tell the desk, or "
                          "make the halt as root", file=sys.stderr)
            return
        self._spool_as_package_user()

    def _spool_as_package_user(self) -> None:
        """The alerts raised in a child that becomes the package's user. What the child says
        (the alerts' log, a traceback) comes back through a pipe to this process's stderr:
        under take-requests that is the operator's answer, which the child's copy never was."""
        from market_timers.alerts.api import raise_alert
        from market_timers.alerts.privileges import become_service_user

        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: the package's user, the alerts, out
            code = 1
            try:
                os.close(read_end)
                sys.stderr = open(write_end, "w", buffering=1, errors="replace")
                become_service_user(self.config)
                _resolve_lifted(self.config, self.resolving)
                for kw in self.pending:
                    raise_alert(self.config, **kw)
                code = 0
            except BaseException:  # said before _exit, which would swallow the traceback
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        os.close(write_end)
        with open(read_end, "rb") as said:
            sys.stderr.write(said.read().decode(errors="replace"))
        if os.waitpid(pid, 0)[1]:
            print("market-timers: the halt's alerts could not be spooled (the error is above): "
                  "tell the desk", file=sys.stderr)
