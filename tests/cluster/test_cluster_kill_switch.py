"""The kill switch holds on every path (issue 44): a cluster halt is mirrored on each node by its
halt-watch (root's), and the runner reads the mirror when the ledger cannot be reached; an order
job never runs outside the cluster ledger; a login that fails for want of a password (or of the
DSN credential) is a configuration error, never "unreachable". Against a real PostgreSQL."""

from __future__ import annotations

import subprocess

import pytest
from tests.controls.test_halt import FakeSystemctl
from tests.fakes.pgserver import free_port

from market_timers.config.loader import load
from market_timers.contracts import exitcodes
from market_timers.controls import halt as halt_mod
from market_timers.controls import haltwatch
from market_timers.controls import resume as resume_mod

from .test_cluster_halt import _now
from .test_cluster_pause import node_configs
from .test_cluster_runner import RUNNER, node_env


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    path = tmp_path / "halt-mirror"
    monkeypatch.setenv("MARKET_HALT_MIRROR_DIR", str(path))
    return path


@pytest.fixture
def nodes(tmp_path, dsn, monkeypatch):
    return {node: load(path) for node, path in node_configs(tmp_path, dsn, monkeypatch).items()}


def _down() -> str:
    return f"host=127.0.0.1 port={free_port()} dbname=mt user=mt password=pw connect_timeout=2"


def _run(env: dict, marker) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNNER, "--", "/usr/bin/touch", str(marker)], capture_output=True,
                          text=True, timeout=60, env=env)


def _look(config) -> None:
    assert haltwatch.watch(config, systemctl=FakeSystemctl(), passes=1) == 0


def test_a_cluster_halt_holds_on_a_node_that_then_loses_the_ledger(tmp_path, dsn, nodes, mirror):
    """halt --job signal on ny4-a; ny4-b's halt-watch looks once (it mirrors the halt); then the
    ledger is unreachable from ny4-b, whose on_db_unreachable = "run": signal is still refused."""
    assert halt_mod.halt(nodes["ny4-a"], "signal", None, False, "runaway algo", _now(),
                         systemctl=FakeSystemctl()) == 0
    _look(nodes["ny4-b"])
    marker = tmp_path / "ran"
    proc = _run(dict(node_env(tmp_path, _down(), "ny4-b", job="signal", mode="run"),
                     MARKET_HALT_MIRROR_DIR=str(mirror)), marker)
    assert proc.returncode == exitcodes.HALTED, proc.stderr
    assert not marker.exists()
    assert "runaway algo" in proc.stderr and "market-timers resume signal" in proc.stderr
    # the resume reaches the ledger; the next look takes it off the mirror: the job runs again
    assert resume_mod.resume(nodes["ny4-b"], "signal", None, _now()) == 0
    _look(nodes["ny4-b"])
    again = _run(dict(node_env(tmp_path, _down(), "ny4-b", job="signal", mode="run"),
                      MARKET_HALT_MIRROR_DIR=str(mirror), INVOCATION_ID="inv-2"), marker)
    assert again.returncode == 0, again.stderr
    assert marker.exists()


def test_the_mirror_is_root_owned_and_not_writable_by_others(dsn, nodes, mirror):
    assert halt_mod.halt(nodes["ny4-a"], None, None, False, "runaway algo", _now(),
                         systemctl=FakeSystemctl()) == 0
    _look(nodes["ny4-b"])
    st = mirror.stat()
    assert st.st_uid == 0 and not st.st_mode & 0o022
    assert sorted(p.name for p in mirror.iterdir() if p.name.startswith("halt-")) == \
        ["halt-orders"]


@pytest.mark.parametrize("mode", ["skip", "run"])
def test_an_order_job_is_never_run_blind_when_the_ledger_is_unreachable(tmp_path, mode, mirror):
    marker = tmp_path / "ran"
    proc = _run(dict(node_env(tmp_path, _down(), "ny4-a", mode=mode), MARKET_ORDERS="1"), marker)
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE, proc.stderr
    assert not marker.exists()
    assert "anyway" not in proc.stderr
    assert "order job" in proc.stderr and "never run outside the cluster ledger" in proc.stderr


def test_a_dsn_without_a_password_is_a_configuration_error_never_run(tmp_path, dsn, mirror):
    """libpq's "fe_sendauth: no password supplied" (a credential file that lost its password):
    the server was reached and asked for one; with on_db_unreachable = "run" it is not run."""
    no_password = " ".join(p for p in dsn.split() if not p.startswith("password="))
    marker = tmp_path / "ran"
    proc = _run(node_env(tmp_path, no_password, "ny4-a", job="signal", mode="run"), marker)
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE, proc.stderr
    assert not marker.exists()
    assert "anyway" not in proc.stderr
    assert "no password supplied" in proc.stderr and "configuration error" in proc.stderr


def test_a_missing_dsn_credential_is_a_configuration_error_never_run(tmp_path, dsn, mirror):
    env = node_env(tmp_path, dsn, "ny4-a", job="signal", mode="run")
    env["MARKET_CLUSTER_DSN_FILE"] = str(tmp_path / "nope")
    marker = tmp_path / "ran"
    proc = _run(env, marker)
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE, proc.stderr
    assert not marker.exists()
    assert "cluster DSN credential" in proc.stderr and "configuration error" in proc.stderr


def test_halt_watch_behind_a_holding_proxy_does_not_hang(tmp_path, dsn, pgserver, nodes,
                                                         mirror, monkeypatch, capsys):
    """A middlebox holds every byte while the TCP connection stays up: each step of halt-watch
    has a deadline, so it gives up the held connection and tries again, rather than freeze."""
    import threading

    from tests.fakes.stallproxy import HoldingProxy

    monkeypatch.setattr(haltwatch, "RECHECK_SEC", 1)
    monkeypatch.setattr(haltwatch, "QUERY_SEC", 2, raising=False)
    proxy = HoldingProxy(pgserver.port)
    held = tmp_path / "held-dsn"
    held.write_text(" ".join(f"port={proxy.port}" if w.startswith("port=") else w
                             for w in dsn.split()) + "\n")
    monkeypatch.setenv("MARKET_CLUSTER_DSN_FILE", str(held))
    listener = threading.Thread(target=haltwatch.watch, args=(nodes["ny4-b"],),
                                kwargs={"systemctl": FakeSystemctl(), "passes": 4}, daemon=True)
    try:
        listener.start()
        for _ in range(200):
            if (mirror / "looked").exists():
                break
            listener.join(0.05)
        assert (mirror / "looked").exists(), "halt-watch never looked"
        proxy.hold()
        listener.join(20)
        assert not listener.is_alive(), "halt-watch froze on the held connection"
    finally:
        proxy.close()
    assert "trying again" in capsys.readouterr().err


def test_halt_watch_tells_systemd_it_is_ready_and_alive_at_each_look(dsn, nodes, mirror,
                                                                     tmp_path, monkeypatch):
    import socket

    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setattr(haltwatch, "RECHECK_SEC", 0.1)
    assert haltwatch.watch(nodes["ny4-b"], systemctl=FakeSystemctl(), passes=2) == 0
    sock.settimeout(1)
    said = [sock.recv(100).decode() for _ in range(3)]
    sock.close()
    assert said == ["READY=1", "WATCHDOG=1", "WATCHDOG=1"]
