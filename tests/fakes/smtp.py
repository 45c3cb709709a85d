"""A real SMTP server (aiosmtpd) on loopback: STARTTLS with a self-signed certificate made here with
the openssl CLI, AUTH LOGIN/PLAIN required after TLS, recipients that can be refused.

In a test:   cert, key = make_cert(tmp_path)
             with FakeSmtp(cert=cert, key=key, user="u", password="p") as smtp: ... smtp.messages
             FakeSmtp() without cert/user is a plain relay (port-25 style).
Standalone:  python -m tests.fakes.smtp --port 8025 --log /tmp/mail.jsonl [--tls-dir D --user U
             --password P] [--refuse addr ...]   (prints the CA file to trust when --tls-dir is given)
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import subprocess
import threading
import time
from email import message_from_bytes, policy
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

LOOPBACK = "127.0.0.1"


def make_cert(directory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1/localhost; the cert is also the CA to trust."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class _Handler:
    def __init__(self, fake: FakeSmtp):
        self.fake = fake

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.fake.refuse:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        msg = message_from_bytes(envelope.content, policy=policy.default)
        with self.fake.lock:
            self.fake.messages.append(msg)
            self.fake.envelopes.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                        "tls": session.ssl is not None  # STARTTLS
                                        or server.transport.get_extra_info("ssl_object")
                                        is not None,  # implicit TLS
                                        "authenticated": bool(session.authenticated)})
            if self.fake.log_path:
                with open(self.fake.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"to": list(envelope.rcpt_tos), "subject": msg["Subject"],
                                        "auto_submitted": msg["Auto-Submitted"],
                                        "body": msg.get_body(("plain",)).get_content()}) + "\n")
        return "250 Message accepted"


class FakeSmtp:
    def __init__(self, port: int = 0, cert: str | None = None, key: str | None = None,
                 user: str | None = None, password: str | None = None,
                 refuse: set[str] | None = None, log_path: str | None = None,
                 implicit_tls: bool = False):
        self.port = port or free_port()
        self.refuse = set(refuse or ())
        self.messages: list = []
        self.envelopes: list[dict] = []
        self.log_path = log_path
        self.lock = threading.Lock()
        self.credentials = (user, password)
        kwargs: dict = {}
        if cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
            if implicit_tls:  # SMTPS (465): TLS from the first byte, no STARTTLS
                kwargs.update(ssl_context=context)
            else:
                kwargs.update(tls_context=context, require_starttls=True)
        if user:
            # aiosmtpd counts only STARTTLS as TLS for AUTH; an implicit-TLS connection is TLS
            # from its first byte
            kwargs.update(authenticator=self._authenticate, auth_required=True,
                          auth_require_tls=bool(cert) and not implicit_tls)
        self.controller = Controller(_Handler(self), hostname=LOOPBACK, port=self.port, **kwargs)

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and \
            (auth_data.login.decode(), auth_data.password.decode()) == self.credentials
        return AuthResult(success=ok, handled=False)

    def start(self) -> FakeSmtp:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def __enter__(self) -> FakeSmtp:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="fake SMTP server on 127.0.0.1")
    p.add_argument("--port", type=int, default=8025)
    p.add_argument("--log", help="append each delivered message as a JSON line")
    p.add_argument("--tls-dir", help="make a self-signed cert here and require STARTTLS")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--refuse", nargs="*", default=[])
    args = p.parse_args(argv)
    cert = key = None
    if args.tls_dir:
        cert, key = make_cert(args.tls_dir)
        print(f"trust this CA (tls_ca_file): {cert}", flush=True)
    fake = FakeSmtp(args.port, cert, key, args.user, args.password, set(args.refuse), args.log)
    fake.start()
    print(f"fake SMTP listening on {LOOPBACK}:{fake.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
