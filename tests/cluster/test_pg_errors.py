"""What the cluster ledger says when something is wrong: libpq's error text without any fragment
of the DSN, a row that is not UTF-8 as a ledger error (not a traceback), libpq found by soname."""

from __future__ import annotations

import ctypes.util
import os
import subprocess

import pytest
from tests.cluster.test_cluster_runner import RUNNER, SESSION, node_env
from tests.fakes.pgserver import PASSWORD

from market_timers.contracts import exitcodes
from market_timers.ledger import DatabaseError, Key, libpq
from market_timers.ledger import postgresql as pg

SECRET = "s3cr3tpw"
# DSNs that libpq refuses while parsing, each echoing a fragment holding the password
MALFORMED = [
    f"postgresql://mt:{SECRET[:4]}%zz{SECRET[4:]}@127.0.0.1:5432/mt",  # invalid percent-encoded
    f"host=127.0.0.1 port=5432 dbname=mt user=mt password{SECRET}",  # missing "="
    f"host=127.0.0.1 port=5432 user=mt password={SECRET} {SECRET}x=1",  # invalid option
    f"postgresql://mt:{SECRET}@127.0.0.1:5432/mt?{SECRET}=1",  # invalid URI query parameter
    f"postgresql://mt:{SECRET}@[::1:5432/mt",  # the whole URI, echoed
    f"host=127.0.0.1 port=5432 password={SECRET} sslmode={SECRET}2",  # invalid sslmode value
    f"postgresql://mt:{SECRET}@127.0.0.1:5432/mt?connect_timeout={SECRET}",
]


@pytest.mark.parametrize("dsn", MALFORMED)
def test_a_malformed_dsn_is_reported_without_any_fragment_of_the_password(dsn):
    with pytest.raises(DatabaseError) as err:
        pg.PostgresLedger(dsn, "ny4-a").holder(Key("closing-orders", SESSION))
    text = str(err.value)
    assert SECRET[:4] not in text and SECRET[4:] not in text, text
    assert text  # still says what is wrong


def test_the_runner_journals_a_malformed_dsn_without_the_password(tmp_path):
    proc = subprocess.run([*RUNNER, "--", "/bin/true"], capture_output=True, text=True,
                          timeout=30, env=node_env(tmp_path, MALFORMED[1], "ny4-a"))
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE, proc.stderr
    assert SECRET not in proc.stderr and "missing" in proc.stderr


def test_redaction_keeps_where_it_connects_and_drops_every_other_value():
    from market_timers.ledger.conninfo import fragments, redact

    dsn = f"host=db1.example.org port=5433 user=mt password='{SECRET} x' options='-c a=b'"
    message = f'connection to server at "db1.example.org", port 5433 failed: {SECRET} x -c a=b'
    text = redact(message, dsn)
    assert "db1.example.org" in text and "5433" in text
    assert SECRET not in text and "-c a=b" not in text
    assert f"{SECRET} x" in fragments(dsn)


def test_a_row_that_is_not_utf8_is_a_ledger_error_not_a_traceback(tmp_path, dsn):
    key = Key("closing-orders", SESSION)
    pg.PostgresLedger(dsn, "ny4-a").claim(key, "timer", {"by": "opérateur"})
    latin1 = dsn + " client_encoding=LATIN1"  # the server sends the row as Latin-1 bytes
    with pytest.raises(DatabaseError, match="not UTF-8"):
        pg.PostgresLedger(latin1, "ny4-b").holder(key)
    proc = subprocess.run([*RUNNER, "--", "/bin/true"], capture_output=True, text=True,
                          timeout=30, env=node_env(tmp_path, latin1, "ny4-b"))
    assert proc.returncode == exitcodes.LEDGER_UNREACHABLE, proc.stderr
    assert "Traceback" not in proc.stderr and "not UTF-8" in proc.stderr


def test_libpq_is_loaded_by_soname_without_a_path_or_a_search(monkeypatch, pgserver):
    """No amd64 path, no ldconfig/gcc search (ctypes.util): the dynamic loader finds libpq.so.5
    on every architecture."""
    monkeypatch.setattr(libpq, "_lib", None)
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists",
                        lambda p: False if "libpq" in str(p) else real_exists(p))
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pg.connect(pgserver.dsn) as conn:
        assert conn.execute("SELECT 1") == [("1",)]


@pytest.fixture(scope="module")
def tls_server():
    from tests.fakes.pgserver import PgServer, missing

    if missing():
        pytest.skip(missing())
    server = PgServer().start()
    try:
        ca = server.enable_tls()
        with pg.connect(server.dsn) as conn:
            pg.init_schema(conn)
        yield server, ca
    finally:
        server.destroy()


def test_the_ledger_over_tls_with_verify_full_against_a_self_signed_ca(tls_server, tmp_path):
    """The README's set-up: sslmode=verify-full with the CA that signed the server's certificate
    (the server's name checked too); the same DSN with another CA is refused, without the
    password in the error."""
    server, ca = tls_server
    dsn = f"{server.dsn} sslmode=verify-full sslrootcert={ca}"
    ledger = pg.PostgresLedger(dsn, "ny4-a")
    assert ledger.claim(Key("closing-orders", SESSION), "timer", {}).ok
    assert ledger.conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") == [
        ("t",)]
    other = tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=someone else", "-keyout", str(tmp_path / "k"), "-out",
                    str(other)], check=True, capture_output=True)
    with pytest.raises(DatabaseError) as err:
        pg.PostgresLedger(f"{server.dsn} sslmode=verify-full sslrootcert={other}",
                          "ny4-a").holder(Key("closing-orders", SESSION))
    assert "certificate verify failed" in str(err.value) and PASSWORD not in str(err.value)
