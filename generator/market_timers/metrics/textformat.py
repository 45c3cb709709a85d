"""The Prometheus text format: a metric family (Family) and render(), with its escaping.

Written by hand (about 30 lines) rather than with prometheus_client: the runner's ExecStopPost=
runs the metrics after every job, the format is small and fixed, and a runtime dependency would
have to be pinned and shipped in the package for it. The tests parse the output with
prometheus_client's own parser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

PREFIX = "market_timers_"


@dataclass
class Family:
    name: str  # without the prefix
    type: str  # gauge | counter
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float | None, **labels: str) -> None:
        if value is not None:
            self.samples.append((labels, float(value)))


def _escape_label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def render(families: list[Family]) -> str:
    """The Prometheus text exposition format 0.0.4 (what node_exporter's textfile collector
    reads): HELP and TYPE once per family, then its samples, under the same name (a counter's
    name, `_total` included, as in the classic format; OpenMetrics would drop it)."""
    out = []
    for fam in families:
        full = PREFIX + fam.name
        out.append(f"# HELP {full} {_escape_help(fam.help)}")
        out.append(f"# TYPE {full} {fam.type}")
        for labels, value in fam.samples:
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
            out.append(f"{full}{{{text}}} {_number(value)}" if text else f"{full} {_number(value)}")
    return "\n".join(out) + "\n"
