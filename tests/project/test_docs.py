"""Keep the man pages honest: what the code accepts is documented, and the examples still work.

man/market-timers.1 must name every command and every option string of cli.build_parser(), every
MARKET_* variable the generated units and the runner use, and every exit code; and
man/market-timers.toml.5 must describe every key of every table declared in config/tables.py, in
that table's section, and its EXAMPLE must load.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from market_timers import cli
from market_timers.config import jobs as job_config
from market_timers.config import loader as config
from market_timers.contracts import exitcodes, outcomes
from market_timers.schema.problems import Problems

ROOT = Path(__file__).resolve().parents[2]
MAN1 = ROOT / "man" / "market-timers.1"
MAN5 = ROOT / "man" / "market-timers.toml.5"
PACKAGE = ROOT / "generator" / "market_timers"
EXAMPLE = ROOT / "scripts" / "examples" / "market-timers.example.toml"

_ESCAPES = {r"\-": "-", r"\(dq": '"', r"\(aq": "'", r"\(en": "-", r"\(->": "->", r"\e": "\\",
            r"\&": "", r"\c": "", r"\(bu": "*", r"\(mu": "x"}


def unroff(text: str) -> str:
    """The roff source with the escapes these pages use turned back into plain characters."""
    text = re.sub(r"\\f[BIRP]", "", text)
    for escape, plain in _ESCAPES.items():
        text = text.replace(escape, plain)
    return text


def source(path: Path) -> str:
    return unroff(path.read_text())


def has_word(text: str, word: str) -> bool:
    """`word` occurs not as part of a longer name (so "--to" is not found inside "--tz")."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def tags(text: str) -> list[str]:
    """The first word of each .TP/.TQ tag line (e.g. `.BR horizon " (integer...)"` -> horizon)."""
    lines = text.splitlines()
    out = []
    for before, line in zip(lines, lines[1:], strict=False):
        if before.split()[:1] in ([".TP"], [".TQ"]):
            words = line.split()
            if words and words[0].startswith("."):
                words = words[1:]
            if words:
                out.append(words[0].strip('"'))
    return out


def section(text: str, heading: str) -> str:
    """The lines of `.SH heading` up to the next .SH."""
    m = re.search(rf"^\.SH \"?{re.escape(heading)}\"?$(.*?)(?=^\.SH |\Z)", text, re.M | re.S)
    assert m, f"no .SH {heading} section"
    return m.group(1)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("cli.build_parser() has no subcommands")


# ------------------------------------------------------------------------------------------------
# market-timers(1)


def test_every_command_has_its_section_in_the_man_page():
    text = source(MAN1)
    headings = set(re.findall(r"^\.SS (\S+)$", text, re.M))
    missing = sorted(set(subparsers()) - headings)
    assert not missing, f"commands without a `.SS NAME` section in {MAN1.name}: {missing}"


def test_every_option_and_choice_of_every_command_is_in_the_man_page():
    text = source(MAN1)
    parsers = {"(global)": cli.build_parser(), **subparsers()}
    missing = []
    for name, parser in parsers.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            words = list(action.option_strings) + [str(c) for c in action.choices or ()]
            missing += [f"{name} {w}" for w in words if not has_word(text, w)]
    assert not missing, f"options not documented in {MAN1.name}: {missing}"


def test_the_jobs_environment_is_documented():
    text = source(MAN1)
    from market_timers.contracts import environment

    code = (PACKAGE / "schedule" / "render.py").read_text() + "".join(
        p.read_text() for p in sorted((PACKAGE / "runner").glob("*.py")))
    names = set(re.findall(r"\bMARKET_[A-Z_]+\b", code)) | {"PYTHONFAULTHANDLER"}
    names |= set(environment.NAMES)  # the unit <-> runner contract, every name
    names |= {config.ENV_VAR, "MARKET_TIMERS_TEMPLATES"}
    missing = sorted(n for n in names if not has_word(text, n))
    assert not missing, f"environment variables not documented in {MAN1.name}: {missing}"


def test_every_exit_code_is_documented():
    text = source(MAN1)
    exit_status = section(text, "EXIT STATUS")
    codes = {v for k, v in vars(exitcodes).items() if k.isupper() and isinstance(v, int)}
    documented = {int(t) for t in tags(exit_status) if t.isdigit()}
    assert codes <= documented, f"exit codes without a tag in EXIT STATUS: {codes - documented}"


MAN_RUN = ROOT / "man" / "market-timers-run.1"
_FONTS = {".B", ".I", ".BR", ".RB", ".IR", ".RI", ".BI", ".IB"}


def plain(lines: list[str]) -> str:
    """An entry's roff lines as one line of text: font macros' words joined as groff sets them."""
    out = []
    for line in lines:
        macro, _, rest = line.partition(" ")
        if macro in _FONTS:
            words = shlex.split(rest)
            line = " ".join(words) if macro in (".B", ".I") else "".join(words)
        out.append(line)
    return " ".join(" ".join(out).split())


def runner_exits(path: Path) -> dict[int, str]:
    """The runner's exit statuses (LSB's 150-199) tagged in `path`'s EXIT STATUS, each with its
    entry's text."""
    lines = section(source(path), "EXIT STATUS").splitlines()
    found = {}
    for i, line in enumerate(lines[:-1]):
        tag = lines[i + 1].removeprefix(".B ")
        if line == ".TP" and tag.isdigit() and 150 <= int(tag) <= 199:
            body = list(itertools.takewhile(
                lambda x: x.split(" ")[0] not in (".TP", ".PP", ".SH"), lines[i + 2:]))
            found[int(tag)] = plain(body)
    return found


@pytest.mark.parametrize("page", [MAN1, MAN_RUN], ids=lambda p: p.name)
def test_the_exit_status_table_is_the_outcome_table(page: Path):
    """Every row of the outcome table with a runner exit status has its entry in the page's EXIT
    STATUS, and every runner exit status there is a row: named by its brief, and in
    market-timers-run(1) the row's explanation first."""
    rows = {o.exit: o for o in outcomes.OUTCOMES if o.exit is not None}
    entries = runner_exits(page)
    roff = {code: f".TP\n.B {code}\n{o.brief}: {o.explain}".replace("-", "\\-")
            for code, o in rows.items()}
    missing = [roff[code] for code in sorted(set(rows) - set(entries))]
    assert not missing, f"{page.name} EXIT STATUS lacks the outcome rows:\n" + "\n".join(missing)
    extra = sorted(set(entries) - set(rows))
    assert not extra, f"{page.name} EXIT STATUS has codes that are no outcome row: {extra}"
    for code, o in rows.items():
        head = f"{o.brief}: {o.explain}" if page == MAN_RUN else f"{o.brief}:"
        assert entries[code].startswith(head), \
            f"{page.name} {code} should start {head!r}: {entries[code][:80]!r}"


def test_a_new_outcome_row_is_asked_of_the_man_pages(monkeypatch):
    """The check above fails on a row the pages lack, and gives the entry to add."""
    row = outcomes.Outcome("demo-refused", exit=169, brief="demo refused", explain="a row.")
    monkeypatch.setattr(outcomes, "OUTCOMES", (*outcomes.OUTCOMES, row))
    for page in (MAN1, MAN_RUN):
        with pytest.raises(AssertionError, match=r"\.B 169\n\s*demo refused: a row\."):
            test_the_exit_status_table_is_the_outcome_table(page)


def test_the_unit_names_and_header_are_documented():
    from market_timers.schedule.render import GENERATED_MARK

    text = source(MAN1)
    assert GENERATED_MARK in text
    assert "market-signal@2025-11-28-174500.timer" in text  # 12:45 New York on the early close


# ------------------------------------------------------------------------------------------------
# market-timers.toml(5)


def entry(text: str, tag: str) -> str:
    """The `.TP` entry whose tag line starts with `tag` (".B tag" or ".BR tag ..."), up to the
    next .TP/.PP/.SS/.SH."""
    m = re.search(rf"^\.TP\n\.BR? {re.escape(tag)}(?:[ \t][^\n]*)?\n(.*?)(?=^\.(?:TP|PP|SS|SH)\b|\Z)",
                  text, re.M | re.S)
    return m.group(1) if m else ""


def test_every_key_of_every_table_is_described_in_its_section():
    """Each declared table (config/tables.py): every key has its own .TP entry in the table's
    section, or, for a table described by one entry ([[events.count]], [alerts.email]...), is
    named in that entry."""
    from market_timers.config.tables import tables

    text = source(MAN5)
    missing = []
    for doc in tables():
        part = section(text, doc.section)
        if doc.entry is None:
            # a key holding tables of its own may be described by their tag: [[events.count]]
            described = {t.strip("[]").rsplit(".", 1)[-1] if t.startswith("[") else t
                         for t in tags(part)}
            missing += [f"{doc.name} {key} (no .TP in {doc.section})"
                        for key in doc.table.names if key not in described]
        elif not (body := entry(part, doc.entry)):
            missing.append(f"{doc.name}: no .TP entry {doc.entry} in {doc.section}")
        else:
            missing += [f"{doc.name} {key} (not named in the entry {doc.entry})"
                        for key in doc.table.names if not has_word(body, key)]
    assert not missing, f"{MAN5.name}: " + "; ".join(missing)


def test_the_tables_list_holds_every_table_of_the_config():
    from market_timers.config import loader
    from market_timers.config.tables import tables

    names = {doc.name for doc in tables()}
    sections = {k.name for k in loader.TOP.keys if k.check is None}  # a table of its own
    missing = [s for s in sections if not any(n.strip("[]").startswith(s) for n in names)]
    assert not missing, f"top-level tables not in config/tables.py: {missing}"


def test_the_refused_keys_and_events_are_named():
    text = source(MAN5)
    words = job_config.REFUSED_JOB_KEYS | set(job_config.EVENTS) | set(job_config.SEVERITIES)
    missing = sorted(w for w in words if not has_word(text, w))
    assert not missing, f"not named in {MAN5.name}: {missing}"


def man_example() -> str:
    example = section(source(MAN5), "EXAMPLE")
    m = re.search(r"^\.EX$(.*?)^\.EE$", example, re.M | re.S)
    assert m, "no .EX block in EXAMPLE"
    return m.group(1).strip("\n") + "\n"


def test_the_example_is_a_valid_config():
    problems = Problems(f"{MAN5.name} EXAMPLE")
    cfg = config.parse(tomllib.loads(man_example()), problems)
    assert not problems, "\n".join(problems.lines())
    assert cfg.jobs


def test_the_example_has_the_jobs_of_the_shipped_example():
    shipped = tomllib.loads(EXAMPLE.read_text())["job"]
    documented = tomllib.loads(man_example())["job"]
    assert documented == shipped, f"the EXAMPLE of {MAN5.name} differs from {EXAMPLE.name}"


# ------------------------------------------------------------------------------------------------
# both pages render cleanly


@pytest.mark.parametrize("page", [MAN1, MAN5], ids=lambda p: p.name)
def test_groff_has_no_warnings(page: Path):
    if not shutil.which("groff"):
        pytest.skip("groff is not installed")
    proc = subprocess.run(["groff", "-man", "-ww", "-z", str(page)], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr


@pytest.mark.parametrize("page", [MAN1, MAN5], ids=lambda p: p.name)
def test_mandoc_lint_has_no_warnings(page: Path):
    if not shutil.which("mandoc"):
        pytest.skip("mandoc is not installed")
    proc = subprocess.run(["mandoc", "-T", "lint", "-W", "warning", str(page)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------------
# the channel registry: a new channel without docs fails here


def channel_entry(text: str, name: str) -> str:
    """The `.TP` entry whose tag is `.B [alerts.<name>]`, up to the next .TP/.PP/.SH."""
    m = re.search(rf"^\.TP\n\.B \[alerts\.{re.escape(name)}\]\n(.*?)(?=^\.(?:TP|PP|SH)\b)",
                  text, re.M | re.S)
    return m.group(1) if m else ""


def registered_channels():
    from market_timers.channels import specs

    return specs()


def test_every_channel_has_an_entry_with_its_default_credentials():
    """(Its keys: test_every_key_of_every_table_is_described_in_its_section.)"""
    text = source(MAN5)
    problems = []
    for spec in registered_channels():
        entry = channel_entry(text, spec.name)
        if not entry:
            problems.append(f"no `.TP` / `.B [alerts.{spec.name}]` entry")
            continue
        problems += [f"[alerts.{spec.name}] does not name its default credential {c.default}"
                     for c in spec.credentials() if not has_word(entry, str(c.default))]
    assert not problems, f"{MAN5.name}: " + "; ".join(problems)


def test_the_channel_lists_name_every_channel():
    names = [spec.name for spec in registered_channels()]
    alert = re.search(r"^\.SS alert$(.*?)^\.SS ", source(MAN1), re.M | re.S).group(1)
    assert [n for n in names if not has_word(alert, n)] == [], "market-timers.1 `alert --test`"
    fallback = next(line for line in source(MAN5).splitlines() if line.startswith(".BR fallback"))
    assert ", ".join(names) in fallback, "the default fallback order in market-timers.toml.5"
    guide = (ROOT / "docs" / "guide.md").read_text()
    assert [n for n in names if f"[alerts.{n}]" not in guide] == [], "docs/guide.md's Alerts"
