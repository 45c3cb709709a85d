"""`requires` on the cluster ledger: an upstream's run on any node counts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from market_timers.contracts import exitcodes

from .test_cluster_runner import node_env, start


@pytest.mark.parametrize(("script", "code"), [("exit 0", 0), ("exit 3", exitcodes.REQUIRES_UNMET)])
def test_an_upstream_on_another_node_decides(tmp_path, dsn, script, code):
    upstream = start(node_env(tmp_path, dsn, "ny4-a", job="signal", group="signal"), script)
    upstream.communicate(timeout=30)
    # --record of the upstream's node, as ExecStopPost= does
    env = node_env(tmp_path, dsn, "ny4-a", job="signal", group="signal")
    env.update(SERVICE_RESULT="success" if script == "exit 0" else "exit-code",
               EXIT_CODE="exited", EXIT_STATUS=script.split()[1])
    subprocess.run([sys.executable, "-m", "market_timers.run", "--record"], env=env, check=True,
                   timeout=30)
    marker = tmp_path / "ran"
    env = node_env(tmp_path, dsn, "ny4-b", job="closing-orders")
    env["MARKET_REQUIRES"] = "signal"
    down = start(env, f"touch {marker}")
    _, err = down.communicate(timeout=30)
    assert down.returncode == code, err
    assert marker.exists() == (code == 0)
    if code:
        assert "requires signal" in err and "failed (exit 3)" in err
