"""The `[metrics]` table: where the Prometheus textfile goes.

    [metrics]
    textfile = "/var/lib/prometheus/node-exporter/market_timers.prom"   # the default
    enabled = true                                                     # the default

The file is written only when its directory exists (node_exporter's textfile collector is
installed), so the default costs nothing on a machine without it. Every problem names its key,
e.g. `metrics.textfile`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from market_timers.schema.problems import Problems, table_of
from market_timers.schema.table import Bad, Key, Table
from market_timers.schema.values import flag

DEFAULT_TEXTFILE = "/var/lib/prometheus/node-exporter/market_timers.prom"


@dataclass(frozen=True)
class MetricsConfig:
    textfile: str = DEFAULT_TEXTFILE
    enabled: bool = True

    @property
    def directory(self) -> str:
        return os.path.dirname(self.textfile)


def _textfile(value: object) -> str:
    why = _textfile_problem(value)
    if why:
        raise Bad(why)
    return os.path.normpath(value)


TABLE = Table((
    Key("enabled", flag, True, "write the textfile"),
    Key("textfile", _textfile, DEFAULT_TEXTFILE, "the .prom file node_exporter reads"),
), not_table="must be a table ([metrics])")
KEYS = TABLE.names


def parse_metrics(raw: dict | None, problems: Problems) -> MetricsConfig:
    """Validate `[metrics]`; problems are added (not raised), defaults kept for the bad keys."""
    if raw is None:
        return MetricsConfig()
    values = TABLE.parse(raw, "metrics", problems)
    return MetricsConfig() if values is None else MetricsConfig(**values)


def _textfile_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty string, the path of the .prom file"
    if not value.startswith("/"):
        return "must be an absolute path"
    if any(c in value for c in "\n\0") or value.endswith("/"):
        return "must be the path of a file, not a directory"
    name = os.path.basename(value)
    if not name.endswith(".prom") or name.startswith(".") or name == ".prom":
        return ("must name a file ending in .prom (node_exporter's textfile collector reads only "
                "*.prom files), such as /var/lib/prometheus/node-exporter/market_timers.prom")
    if os.path.dirname(os.path.normpath(value)) == "/":
        return "must be in a directory of its own, not /"
    return None


def metrics_of(config) -> MetricsConfig:
    """The config's MetricsConfig; parses `raw["metrics"]` if config.parse has not done it yet."""
    return table_of(config, "metrics", MetricsConfig, parse_metrics)


def write_paths(config) -> list[str]:
    """The directory a job's sandbox must be able to write for its ExecStopPost= to update the
    metrics ("-"-prefixed in ReadWritePaths=: ignored while it does not exist)."""
    metrics = metrics_of(config)
    return [metrics.directory] if metrics.enabled else []
