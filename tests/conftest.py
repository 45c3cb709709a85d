"""Shared helpers for the unit tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def write_config(tmp_path: Path):
    """write_config(text) -> path of a config file in a tmp dir (state/unit dirs inside it)."""

    def write(text: str, name: str = "market-timers.toml") -> Path:
        body = textwrap.dedent(text)
        prefix = (f'unit_dir = "{tmp_path}/units"\nstate_dir = "{tmp_path}/state"\n'
                  f'spool_dir = "{tmp_path}/spool"\nruntime_dir = "{tmp_path}/run"\n')
        path = tmp_path / name
        path.write_text(prefix + body)
        return path

    return write


@pytest.fixture(autouse=True)
def _no_real_metrics_textfile(tmp_path_factory, monkeypatch):
    """No test writes the host's /var/lib/prometheus/node-exporter: to the metrics, only
    directories under pytest's temporary directory exist."""
    import os

    from market_timers import metrics

    base = str(tmp_path_factory.getbasetemp())
    monkeypatch.setattr(metrics, "directory_exists",
                        lambda path: path.startswith(base + "/") and os.path.isdir(path))
