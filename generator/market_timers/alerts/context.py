"""Everything an alert flow needs, built once from the loaded config: the [alerts] settings, the
state and spool directories, the clock (injected by tests) and the channel factory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from market_timers.alerts.escalation import Escalations
from market_timers.alerts.outbox import Outbox
from market_timers.alerts.state import AlertState
from market_timers.config.alerts import AlertsConfig
from market_timers.contracts import environment

DEFAULT_STATE_DIR = environment.DEFAULT_STATE_DIR
DEFAULT_SPOOL_DIR = environment.DEFAULT_SPOOL_DIR


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class AlertContext:
    cfg: AlertsConfig
    state_dir: Path
    spool_dir: Path
    now: Callable[[], datetime] = utcnow
    env: dict | None = None  # None = os.environ (credentials directory)
    channel_factory: Callable | None = None  # None: the channel registry's make_channel
    note: str = ""  # appended to every alert's text (the config is broken: see snapshot.py)
    node: str = ""  # the cluster node's name ([cluster] node), named in every alert
    # seconds this process's immediate tries may wait, in all, for another send to end
    busy_patience: float = 10.0
    outbox: Outbox = field(init=False)
    state: AlertState = field(init=False)
    escalations: Escalations = field(init=False)

    def __post_init__(self):
        self.state_dir, self.spool_dir = Path(self.state_dir), Path(self.spool_dir)
        self.outbox = Outbox(self.spool_dir)
        self.state = AlertState(self.state_dir)
        self.escalations = Escalations(self.state_dir)

    def channel(self, name: str):
        if self.channel_factory is None:
            # at the first send, not at import: an idle dead-man pass builds a context, sends nothing
            from market_timers.channels import make_channel

            self.channel_factory = make_channel
        return self.channel_factory(name, self.cfg, env=self.env)


def context_from(config, now: Callable[[], datetime] | None = None,
                 env: dict | None = None) -> AlertContext:
    """Accept the core's Config (attributes alerts, state_dir, spool_dir) or an AlertContext."""
    if isinstance(config, AlertContext):
        return config
    cfg = getattr(config, "alerts", None) or AlertsConfig()
    return AlertContext(cfg, getattr(config, "state_dir", None) or DEFAULT_STATE_DIR,
                        getattr(config, "spool_dir", None) or DEFAULT_SPOOL_DIR,
                        now=now or utcnow, env=env, note=getattr(config, "alert_note", "") or "",
                        node=getattr(getattr(config, "cluster", None), "node", "") or "")
