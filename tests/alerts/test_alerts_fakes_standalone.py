"""The fakes run as their own processes (as the e2e tests run them on the host loopback)."""

from __future__ import annotations

import json
import smtplib
import subprocess
import sys
import time
import urllib.request
from email.message import EmailMessage
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def wait_for(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


@pytest.fixture
def http_fake(tmp_path):
    port_file, log = tmp_path / "port", tmp_path / "received.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.http_api", "--port", "0",
                             "--port-file", str(port_file), "--log", str(log), "--token", "T:1"],
                            cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{wait_for(port_file)}", log
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def post(url: str, body: dict) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_standalone_http_fake_logs_messages_and_obeys_scripts(http_fake):
    base, log = http_fake
    assert post(f"{base}/_fake/script", {"service": "telegram", "status": 429,
                                         "retry_after": 2}) == 200
    assert post(f"{base}/botT:1/sendMessage", {"chat_id": 1, "text": "hi"}) == 429
    assert post(f"{base}/botWRONG/sendMessage", {"chat_id": 1, "text": "hi"}) == 401
    assert post(f"{base}/botT:1/sendMessage", {"chat_id": 1, "text": "hi"}) == 200
    assert post(f"{base}/services/A/B/C", {"txt": "no text"}) == 400
    assert post(f"{base}/services/A/B/C", {"text": "to slack"}) == 200
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(m["service"], m["text"]) for m in lines] == [("telegram", "hi"), ("slack", "to slack")]
    with urllib.request.urlopen(f"{base}/_fake/received", timeout=5) as r:
        assert len(json.loads(r.read())) == 2


def test_standalone_smtp_fake_with_starttls_and_auth(tmp_path):
    from tests.fakes.smtp import free_port

    port, log = free_port(), tmp_path / "mail.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.smtp", "--port", str(port),
                             "--log", str(log), "--tls-dir", str(tmp_path / "tls"),
                             "--user", "u", "--password", "p"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert "trust this CA" in proc.stdout.readline()
        assert "listening" in proc.stdout.readline()
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "a@example.org", "b@example.org", "hello"
        msg.set_content("body")
        import ssl

        ctx = ssl.create_default_context(cafile=str(tmp_path / "tls" / "smtp-cert.pem"))
        with smtplib.SMTP("127.0.0.1", port, timeout=5) as s:
            s.starttls(context=ctx)
            s.login("u", "p")
            assert s.send_message(msg) == {}
        [entry] = [json.loads(line) for line in log.read_text().splitlines()]
        assert entry["subject"] == "hello" and entry["to"] == ["b@example.org"]
    finally:
        proc.terminate()
        proc.wait(timeout=5)
