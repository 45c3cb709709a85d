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
