"""The tests run on the versions the package ships: requirements.lock pins every runtime
dependency (debian/rules installs exactly it into the .deb's venv), `make venv` installs with it
as constraints, and pyproject.toml's lower bounds are those tested versions."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[_norm(name)] = pinned
    return pins


def declared() -> dict[str, str]:
    """pyproject.toml's runtime dependencies: name -> lower bound."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)", dep)
        assert m, f"pyproject.toml: {dep!r} has no lower bound"
        out[_norm(m[1])] = m[2]
    return out


def test_every_runtime_dependency_is_pinned_and_its_lower_bound_is_the_pin():
    pins = lock()
    for name, bound in declared().items():
        assert name in pins, f"requirements.lock does not pin {name}"
        assert pins[name] == bound, f"{name}: pyproject.toml >= {bound}, lock == {pins[name]}"


def test_the_venv_the_tests_run_in_has_the_locked_versions():
    wrong = {name: (version(name), pinned) for name, pinned in lock().items()
             if version(name) != pinned}
    assert not wrong, f"installed != requirements.lock (run `make venv`): {wrong}"


def test_make_venv_installs_with_the_lock_as_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert "-c requirements.lock" in makefile
