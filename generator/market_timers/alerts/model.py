"""An alert and its delivery state, as stored (JSON) in the outbox.

The id is made once, when the alert is created, and travels with it: a resend after a crash, a
fallback to another channel and every critical repeat carry the same id, which is what
`market-timers ack ID` takes.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from market_timers.contracts import instants

PENDING = "pending"
UNDELIVERABLE = "undeliverable"


def parse_iso(s: str | None) -> datetime | None:
    return instants.parse_iso(s) if s else None


def make_id(kind: str, key: str, created: datetime, salt: str = "") -> str:
    digest = hashlib.sha256(f"{kind}|{key}|{instants.iso(created)}|{salt}".encode()).hexdigest()[:8]
    return f"{created.astimezone(UTC):%m%d}-{digest}"


@dataclass
class Alert:
    id: str
    kind: str
    severity: str
    key: str
    title: str
    text: str = ""
    job: str = ""
    session: str = ""
    created: str = ""
    details: dict = field(default_factory=dict)  # unit, invocation, scheduled, exit, journal...
    # delivery state
    chain: list[str] = field(default_factory=list)  # channels in order of preference
    channel_index: int = 0
    attempts: int = 0
    channel_since: str = ""
    not_before: str = ""
    state: str = PENDING
    last_error: str = ""
    errors: list[str] = field(default_factory=list)  # one line per channel given up on
    suppressed: int = 0  # same key inside the dedup window: counted, not re-sent
    repeat: int = 0  # 0 = first notice; n = n-th repeat of an unacknowledged critical
    spool_name: str = ""  # file name in the outbox (id, or id.rN for a repeat)
    # an incident told on every channel at once (a halt): one copy per channel, spooled as
    # `<id>[.rN].to-<channel>`, each with the chain [channel]; one id, one ack (issue 45)
    fanout: list[str] = field(default_factory=list)

    @property
    def channel(self) -> str | None:
        return self.chain[self.channel_index] if self.channel_index < len(self.chain) else None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Alert:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def subject(self) -> str:
        tag = "RESOLVED" if self.kind == "recovery" else \
            {"critical": "CRITICAL", "warning": "WARNING", "info": "INFO"}[self.severity]
        again = f" (repeat {self.repeat})" if self.repeat else ""
        return f"[{tag}] {self.title}{again}"

    def head(self, with_subject: bool = True) -> str:
        """Subject, text and context lines: the body without the journal excerpt."""
        lines = [self.subject(), ""] if with_subject else []
        if self.text:
            lines += [self.text, ""]
        for label, value in (("job", self.job), ("session", self.session),
                             ("slot", self.details.get("slot")),
                             ("calendar", self.details.get("calendar")),
                             ("scheduled", self.details.get("scheduled")),
                             ("unit", self.details.get("unit")),
                             ("result", self.details.get("result")), ("host", self._where())):
            if value:
                lines.append(f"{label}: {value}")
        if self.suppressed:
            lines.append(f"repeated {self.suppressed} more time(s) inside the dedup window")
        lines.append(f"alert id: {self.id}" + (
            f" (stop repeats: market-timers ack {self.id})" if self.severity == "critical"
            and self.kind != "recovery" else ""))
        return "\n".join(lines)

    def _where(self) -> str:
        """The host that raised the alert, and its cluster node (issue 45: name the host)."""
        host, node = self.details.get("host"), self.details.get("node")
        return f"{host} (cluster node {node})" if host and node else str(host or "")

    def body(self, excerpt_limit: int | None = None, measure=len,
             with_subject: bool = True) -> str:
        """Plain text: subject, text, context lines, then the journal excerpt; with a limit, the
        whole text is cut to at most `excerpt_limit` units of `measure` (see textfit). Without
        the subject for a channel that shows it as a title of its own."""
        # the channels package: only when a text is fitted
        from market_timers.channels.textfit import fit_parts

        return fit_parts(self.head(with_subject), str(self.details.get("journal") or ""),
                         excerpt_limit, measure)
