"""Rendered units: Quadlet-style case files (assertions in `## ` comments) and golden files.

Each tests/render_cases/*.toml is a config whose `## ` lines say what the units rendered from it
must contain (`## unit NAME` selects a unit; a leading `!` negates an assertion). Golden files in
tests/golden/ catch everything else; regenerate them with `python tests/golden/regen.py` and review
the diff.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from market_timers import cli

CASES = sorted((Path(__file__).parents[1] / "render_cases").glob("*.toml"))
GOLDEN = Path(__file__).parents[1] / "golden"


def parse_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) triples, keeping repeated keys (configparser would drop them)."""
    out, section = [], ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        else:
            key, _, value = line.partition("=")
            out.append((section, key, value))
    return out


def values(unit: list, section: str, key: str) -> list[str]:
    return [v for s, k, v in unit if s == section and k == key]


def check(assertion: str, args: list[str], unit: list) -> bool:
    if assertion == "assert-key-is":
        section, key, value = args
        return values(unit, section, key) == [value]
    if assertion == "assert-key-is-regex":
        section, key, pattern = args
        return any(re.search(pattern, v) for v in values(unit, section, key))
    if assertion == "assert-key-contains":
        section, key, value = args
        return value in values(unit, section, key)
    raise AssertionError(f"unknown assertion {assertion}")


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_render_case(case: Path, tmp_path: Path, capsys):
    lines = [shlex.split(x[3:]) for x in case.read_text().splitlines() if x.startswith("## ")]
    now = next((a[1] for a in lines if a[0] == "now"), "2025-11-27T12:00:00Z")
    out = tmp_path / "units"
    code = cli.main(["--config", str(case), "--now", now, "render", "--out", str(out)])
    err = capsys.readouterr().err
    current: list | None = None
    current_name = ""
    for words in lines:
        op, args = words[0], words[1:]
        if op == "now":
            continue
        if op == "assert-failed":
            assert code == 2, f"expected failure, got {code}"
            continue
        if op == "assert-stderr-contains":
            assert args[0] in err, f"stderr lacks {args[0]!r}:\n{err}"
            continue
        assert code == 0, err
        if op == "unit":
            current_name = args[0]
            path = out / current_name
            assert path.exists(), f"{current_name} not rendered; got {sorted(os.listdir(out))}"
            current = parse_unit(path.read_text())
            continue
        if op == "no-unit":
            assert not (out / args[0]).exists(), f"{args[0]} should not be rendered"
            continue
        negate = op.startswith("!")
        ok = check(op.lstrip("!"), args, current)
        assert ok != negate, (f"{case.name}: {' '.join(words)} failed on {current_name}:\n"
                              + (out / current_name).read_text())


def render_golden(tmp_path: Path) -> Path:
    out = tmp_path / "golden"
    os.chdir(GOLDEN)  # the header names the config as given: keep it independent of the checkout
    assert cli.main(["--config", "config.toml", "--now",
                     "2025-11-26T12:00:00Z", "render", "--out", str(out)]) == 0
    return out


def test_golden_units_are_byte_identical(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = render_golden(tmp_path)
    got = sorted(p.name for p in out.iterdir())
    want = sorted(p.name for p in (GOLDEN / "units").iterdir())
    assert got == want
    for name in want:
        assert (out / name).read_text() == (GOLDEN / "units" / name).read_text(), name


def test_render_is_deterministic_and_idempotent(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = render_golden(tmp_path)
    first = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in a.iterdir()}
    render_golden(tmp_path)  # same dir again: same bytes, files untouched
    again = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in a.iterdir()}
    assert first == again





# --- issue 9: each value escaped for the directive it lands in --------------------------------

from market_timers.schedule import render  # noqa: E402


def test_environment_value_keeps_dollar_and_escapes_percent():
    assert render.quote_env("P", "$5") == "P=$5"
    assert render.quote_env("P", "100%") == "P=100%%"
    assert render.quote_env("P", 'a "b" \\ c\td') == '"P=a \\"b\\" \\\\ c\\td"'


def test_exec_argument_escapes_dollar_and_percent():
    assert render.quote_arg("$5") == "$$5"
    assert render.quote_arg("${X} 100%") == '"$${X} 100%%"'
    assert render.quote_arg(";") == '";"'


def test_paths_are_quoted_not_c_escaped():
    assert render.quote_path("/srv/a b") == '"-/srv/a b"'
    assert render.quote_path("/srv/$x%") == "-/srv/$x%%"


@pytest.mark.parametrize("fn", [render.quote_arg, render.plain, render.quote_path,
                                lambda v: render.quote_env("N", v)])
@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b", "a\x7fb"])
def test_escapers_refuse_control_characters_config_should_have_caught(fn, bad):
    with pytest.raises(render.UnsafeValue):
        fn(bad)


def test_description_with_trailing_backslash_is_refused():
    with pytest.raises(render.UnsafeValue):
        render.plain("joins \\")


def test_config_path_with_a_newline_stays_in_the_comment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "odd\nExecStartPre=+bin-sh.toml"
    (tmp_path / name).write_text('calendar = "XNYS"\nhorizon = 1\n[[job]]\nname = "a"\n'
                                 'event = "close"\ncommand = ["/bin/true"]\n')
    assert cli.main(["--config", name, "--now", "2025-11-27T12:00:00Z", "render",
                     "--out", "u"]) == 0
    for unit in (tmp_path / "u").iterdir():
        assert not any(line.startswith("ExecStartPre") for line in unit.read_text().splitlines())
        assert "odd\\x0aExecStartPre" in unit.read_text()
