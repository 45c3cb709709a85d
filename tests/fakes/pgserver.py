"""A throwaway PostgreSQL server on 127.0.0.1 for the cluster ledger's tests.

Debian's server binaries (package postgresql-15 on Debian 12, postgresql-17 on Debian 13) run
from a temporary data directory owned by the `postgres` user (the server refuses to run as root),
with password (scram-sha-256) authentication on loopback only. `.ci/run` installs the package.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PASSWORD = "ledger-test-pw"
USER = "mt"
DB = "mt"
ADMIN = "mt-admin"  # application_name of the admin sessions that hold locks in tests


def server_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def missing() -> str | None:
    if server_bin() is None:
        return "PostgreSQL server binaries are not installed (apt-get install postgresql)"
    if os.geteuid() != 0:
        return "needs root (the server runs as the postgres user)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, port: int | None = None):
        self.bin = server_bin()
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mt-pg-"))
        self.data = self.dir / "data"
        os.chmod(self.dir, 0o755)
        pw = pwd.getpwnam("postgres")
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def _as_postgres(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True,
                              text=True, check=check, cwd=self.dir)

    def start(self) -> PgServer:
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        pw = pwd.getpwnam("postgres")
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                          "--auth-local=trust", "--auth-host=scram-sha-256",
                          f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                    f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
                    "max_connections = 200\n")
        self.resume()
        self.psql(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self.psql(f"CREATE DATABASE {DB} OWNER {USER}")
        return self

    def enable_tls(self) -> Path:
        """TLS with a self-signed CA and a server certificate for 127.0.0.1 (subjectAltName IP,
        as sslmode=verify-full checks it); the server is restarted. Returns the CA's file."""
        tls = self.dir / "tls"
        tls.mkdir()

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=tls, check=True, capture_output=True)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=market-timers test CA", "-keyout", "ca.key", "-out", "ca.crt")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
                "server.key", "-out", "server.csr")
        (tls / "san.ext").write_text("subjectAltName = IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
        pw = pwd.getpwnam("postgres")
        for name in ("server.crt", "server.key"):
            shutil.copy(tls / name, self.data / name)
            os.chown(self.data / name, pw.pw_uid, pw.pw_gid)
            os.chmod(self.data / name, 0o600)
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("ssl = on\n")
        self.stop()
        self.resume()
        return tls / "ca.crt"

    def resume(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                          str(self.dir / "log"), "-w", "-t", "30", "start")

    def stop(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                          "stop", check=False)

    def psql(self, sql: str, db: str = "postgres") -> str:
        return self._as_postgres("psql", "-h", str(self.dir), "-p", str(self.port), "-d", db,
                                 "-Atc", sql).stdout

    def psql_background(self, sql: str, db: str = "postgres") -> subprocess.Popen:
        """psql started, not waited for: an admin session that holds a lock while a test runs."""
        return subprocess.Popen(["runuser", "-u", "postgres", "--", "psql", "-h", str(self.dir),
                                 "-p", str(self.port), "-d", db, "-v", "ON_ERROR_STOP=1",
                                 "-Atc", sql], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=self.dir)

    def hold_table_lock(self, table: str, seconds: float, db: str = DB) -> subprocess.Popen:
        """An admin session holding ACCESS EXCLUSIVE on `table` for `seconds` (VACUUM FULL, a
        migration), returned once the lock is granted."""
        proc = self.psql_background(f"SET application_name = '{ADMIN}'; BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; "
                                    f"SELECT pg_sleep({seconds}); COMMIT", db)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.psql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                         f"WHERE c.relname = '{table}' AND l.mode = 'AccessExclusiveLock' "
                         "AND l.granted", db).strip() == "1":
                return proc
            if proc.poll() is not None:
                raise RuntimeError(f"the admin lock failed: {proc.stderr.read()}")
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"the admin lock on {table} was not granted within 30 s")

    def end_admin_sessions(self) -> None:
        """Terminate every admin session of hold_table_lock (its locks are released at once)."""
        self.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  f"WHERE application_name = '{ADMIN}'")

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={DB} user={USER} password={PASSWORD}"

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
