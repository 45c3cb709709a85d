"""Servers on loopback that misbehave the way a real endpoint can: a redirecting webhook and a
server that trickles its answer one byte at a time (a send's `timeout` is not a deadline)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOPBACK = "127.0.0.1"


class RedirectServer:
    """Answers every POST with `status` (302...) to /landed, where a GET answers 200."""

    def __init__(self, status: int = 302):
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append(("POST", self.path))
                self.send_response(status)
                self.send_header("Location", "/landed")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                outer.requests.append(("GET", self.path))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class TrickleServer:
    """Reads the request, then sends a valid HTTP answer one byte every `every` seconds."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    def __init__(self, every: float = 0.5, wait_request: bool = True):
        self.every = every
        self.wait_request = wait_request  # False: trickle at once (an SMTP greeting)
        self.sock = socket.socket()
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(8)
        self.url = f"http://{LOOPBACK}:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.connections = 0

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn):
        with conn:
            conn.settimeout(1)
            try:
                if self.wait_request:
                    conn.recv(65536)
                for byte in self.ANSWER:
                    if self.stop.wait(self.every):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def __enter__(self):
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        time.sleep(0.05)
        self.sock.close()
