"""Set-up as a newcomer meets it (issue 27): a missing tool is one line naming the Debian
package that brings it, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from market_timers import cli
from market_timers.contracts import exitcodes

ROOT = Path(__file__).resolve().parents[2]


def test_verify_without_systemd_analyze_names_the_package(tmp_path, monkeypatch, capsys):
    units = tmp_path / "units"
    units.mkdir()
    (units / "market-x.service").write_text("[Service]\nExecStart=/bin/true\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert cli.main(["verify", str(units)]) == exitcodes.FAILURE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "systemd-analyze" in err[0] and "install the Debian package systemd" in err[0]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make (apt install make)")
@pytest.mark.parametrize("cc", ["no-such-cc", "/bin/false"])
def test_make_venv_without_a_c_compiler_names_gcc_and_libc6_dev(tmp_path, cc):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".installed").touch()  # newer than pyproject.toml: the venv itself is not rebuilt
    proc = subprocess.run(["make", "-C", str(ROOT), f"VENV={venv}", f"CC={cc}",
                           f"{venv}/bin/market-timers-exec-at"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "gcc" in proc.stderr and "libc6-dev" in proc.stderr, proc.stderr
    assert "No such file or directory" not in proc.stderr


def test_skip_summary_names_each_reason_and_the_real_recipe(tmp_path):
    (tmp_path / "test_some.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_a(n):\n    pytest.skip('mandoc is not installed')\n"
        "def test_b():\n    pytest.skip('needs root to switch users')\n"
        "def test_c():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])

    def run(extra_env):
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "skipsummary", "-q",
                               "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                              env={**env, **extra_env}, capture_output=True, text=True,
                              timeout=60).stdout

    out = run({})
    assert "3 tests skipped" in out
    assert "2  mandoc is not installed" in out and "1  needs root to switch users" in out
    assert ".ci/run" in out
    assert ".ci/run" not in run({"CI": "true"})  # under CI a skip is a failure anyway


@pytest.mark.skipif(shutil.which("make") is None, reason="no make (apt install make)")
def test_make_venv_without_python3_venv_names_the_package(tmp_path):
    python = tmp_path / "python3"  # a python without ensurepip, as Debian's without python3-venv
    python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: ensurepip' >&2\nexit 1\n")
    python.chmod(0o755)
    proc = subprocess.run(["make", "-C", str(ROOT), f"VENV={tmp_path}/venv", f"PYTHON={python}",
                           f"{tmp_path}/venv/.installed"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "install the Debian package python3-venv" in proc.stderr, proc.stderr
