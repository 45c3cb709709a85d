"""Root-run admin commands switch to the service user and keep secrets root-only on disk."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")

SCRIPT = """
import os, sys
from types import SimpleNamespace
from market_timers.alerts import privileges
privileges.CREDSTORES = (sys.argv[1],)
privileges.UNIT_DIRS = (sys.argv[2],)
privileges.environment.PACKAGE_USER = "nobody"  # this host has no package user: nobody stands in
# The config names two secrets; only t.token is loaded by a unit of the package.
privileges.credential_names = lambda config: ["t.token", "host.key"]
cfg = SimpleNamespace(user="root")  # the jobs' user: never whom root switches to
print(privileges.become_service_user(cfg), os.getuid())
d = os.environ["MARKET_TIMERS_CREDENTIALS_DIRECTORY"]
print(open(os.path.join(d, "t.token")).read().strip())
print(sorted(os.listdir(d)))
"""


def test_root_switches_to_the_service_user_with_its_credentials(tmp_path):
    store = tmp_path / "credstore"
    store.mkdir()
    (store / "t.token").write_text("123:SECRET\n")
    (store / "host.key").write_text("PRIVATE KEY\n")
    for f in store.iterdir():
        os.chmod(f, 0o600)
    units = tmp_path / "system" / "market-outbox.service.d"
    units.mkdir(parents=True)
    (units / "market-timers-credentials.conf").write_text("[Service]\nLoadCredential=t.token\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("CREDENTIALS_DIRECTORY", "MARKET_TIMERS_CREDENTIALS_DIRECTORY")}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(store), str(tmp_path / "system")],
                         env=env,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    import pwd

    assert out[0] == f"True {pwd.getpwnam('nobody').pw_uid}"
    assert out[1] == "123:SECRET"  # readable by the service user through its private copy
    assert out[2] == "['t.token']"  # host.key is loaded by no unit: never handed over
    assert oct(os.stat(store / "t.token").st_mode & 0o777) == "0o600"  # the store is untouched
