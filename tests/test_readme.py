"""The README's config examples are valid configs (docs that drift are caught here)."""

from __future__ import annotations

import re
from pathlib import Path

from market_timers import config

README = Path(__file__).resolve().parents[1] / "README.md"


def toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_config_examples_load_without_problems(tmp_path):
    blocks = toml_blocks()
    assert len(blocks) == 3
    path = tmp_path / "readme.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n' + "\n".join(blocks))
    cfg = config.load(path)
    assert [j.name for j in cfg.jobs] == ["signal", "nightly", "cycle", "digest"]
    assert cfg.alerts.telegram.chat_id == "-1001234567890" and cfg.watch.ping is True
