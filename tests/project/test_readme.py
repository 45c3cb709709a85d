"""The README (the door) and the operator's guide (docs/guide.md): their config examples are valid
configs, and the set-up names what it needs (docs that drift are caught here)."""

from __future__ import annotations

import re
from pathlib import Path

from market_timers.config import loader as config

README = Path(__file__).resolve().parents[2] / "README.md"
GUIDE = README.parent / "docs" / "guide.md"
HACKING = README.parent / "HACKING.md"


def toml_blocks(doc: Path = GUIDE) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", doc.read_text(), flags=re.S)


def test_the_readme_is_a_door_of_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200
    for page in ("market-timers(1)", "market-timers.toml(5)", "market-timers-run(1)",
                 "docs/guide.md", "docs/design.md", "bench/RESULTS.md", "HACKING.md"):
        assert page in README.read_text(), page
    assert "`CI=true bash .ci/run`" in README.read_text()  # the CI time figure and its command


def test_the_readmes_one_config_loads_and_marks_its_order_job(tmp_path):
    [block] = toml_blocks(README)
    path = tmp_path / "readme.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n' + block)
    cfg = config.load(path)
    assert [j.name for j in cfg.jobs] == ["signal", "closing-orders"]
    assert cfg.job("closing-orders").orders and cfg.job("closing-orders").requires == ("signal",)


def test_guide_config_examples_load_without_problems(tmp_path):
    blocks = [b for b in toml_blocks() if not b.startswith("[events]")]
    assert len(blocks) == 5  # ... session rules, ... and a cluster node's [cluster]
    path = tmp_path / "readme.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n' + "\n".join(blocks))
    cfg = config.load(path)
    assert [j.name for j in cfg.jobs] == ["signal", "nightly", "rebalance", "expiry",
                                          "fx-hedge", "overnight-risk", "cycle", "digest"]
    assert cfg.job("fx-hedge").calendars == ("XNYS", "XLON")
    assert cfg.job("rebalance").sessions.offset == 2
    assert cfg.job("expiry").sessions.months == {3, 6, 9, 12}
    assert cfg.job("overnight-risk").sessions.attributes == (("early_close", "never"),)
    assert cfg.alerts.telegram.chat_id == "-1001234567890" and cfg.watch.ping is True
    assert (cfg.cluster.node, cfg.cluster.standby_delay) == ("ny4-a", 0)


def test_guide_events_example_loads_with_the_shipped_example_jobs(tmp_path):
    [events] = [b for b in toml_blocks() if b.startswith("[events]")]
    example = README.parent / "scripts" / "examples" / "market-timers.example.toml"
    jobs = example.read_text().split("\n[events]")[0]
    path = tmp_path / "readme-events.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n' + jobs + "\n" + events)
    cfg = config.load(path)
    assert [r.name for r in cfg.events.incidents] == ["connection"]
    assert cfg.events.expected[0].after_job == "disconnect"


def _set_up_section() -> str:
    text = README.read_text()
    return text[text.index("## Set-up"):text.index("## Install")]


def _test_suite_section() -> str:
    text = HACKING.read_text()
    return text[text.index("## The test suite"):text.index("## Packages")]


def test_hacking_names_every_package_ci_installs():
    ci = (README.parent / ".ci" / "run").read_text()
    installs = re.findall(r"apt-get install -y -q --no-install-recommends((?:\\\n|[^\n])*)", ci)
    packages = {p for line in installs  # each command's words, up to its comment
                for p in line.replace("\\\n", " ").split("#")[0].split()}
    assert {"gcc", "libc6-dev", "groff-base", "postgresql"} <= packages  # the parse is right
    section = _test_suite_section()
    missing = sorted(p for p in packages if f"`{p}`" not in section)
    assert missing == [], f"HACKING.md's test suite does not name {missing} (installed by .ci/run)"


def test_readme_first_set_up_line_names_what_make_demo_needs():
    first = _set_up_section().split("```sh")[0]
    for package in ("make", "python3-venv", "gcc", "libc6-dev", "systemd"):
        assert f"`{package}`" in first or f" {package}" in first, package
