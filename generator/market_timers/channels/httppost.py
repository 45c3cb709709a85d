"""POST a body with a total deadline, never following a redirect.

urllib's `timeout` bounds each socket operation, not the request: a server trickling one byte
every 2 s held a send with `timeout = 3` for 53 s while the flush held the outbox lock. Here a
timer shuts the request's sockets down when the deadline passes, so every blocked read returns at
once and the attempt fails as "deadline exceeded". urllib still does the rest (proxies from the
environment, TLS with the system's CAs); its redirect handler is replaced by one that refuses: a
3xx answer to a POST is returned as it is, and the channel counts it as a failed attempt (urllib
would follow it as a GET without the body and report success).

Errors are raised as PostError whose text is our own words: an exception's text may embed the
URL, and the URLs (Telegram's token, Slack's webhook, the ping URL) are secrets.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass


class PostError(Exception):
    """A request that got no HTTP answer. `config` is True when the URL itself is unusable."""

    def __init__(self, message: str, *, config: bool = False):
        super().__init__(message)
        self.config = config


@dataclass
class Response:
    status: int
    body: str
    headers: dict


class Deadline:
    """Shuts down every watched socket when `seconds` have passed (also used by email)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.timer = threading.Timer(seconds, self.expire)
        self.timer.daemon = True

    def remaining(self) -> float:
        return max(0.05, self.end - time.monotonic())

    def watch(self, sock) -> None:
        with self.lock:
            self.socks.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            socks = list(self.socks)
        for sock in socks:
            _shut(sock)


def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing left to interrupt


def _connection(base, deadline: Deadline):
    class Conn(base):
        def connect(self):
            self.timeout = deadline.remaining()
            super().connect()
            deadline.watch(self.sock)

    return Conn


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError(3xx): returned to the caller as the answer


def _opener(deadline: Deadline):
    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(_connection(http.client.HTTPConnection, deadline), req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(_connection(http.client.HTTPSConnection, deadline), req,
                                context=self._context)

    return urllib.request.build_opener(_NoRedirect, HTTPHandler, HTTPSHandler)


def _read(response, limit: int = 65536) -> str:
    try:
        return response.read(limit).decode("utf-8", "replace")
    except Exception:  # a body we cannot read changes nothing about the status
        return ""


def post(url: str, body: bytes, headers: dict, timeout: float) -> Response:
    """POST `body`; any HTTP status comes back as a Response, everything else as PostError."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise PostError("the configured URL contains a space or a control character",
                        config=True)
    deadline = Deadline(timeout)
    try:
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    except ValueError:
        raise PostError("the configured URL is malformed", config=True) from None
    if request.type not in ("http", "https"):
        raise PostError("the configured URL's scheme is not http or https", config=True)
    deadline.timer.start()
    try:
        with _opener(deadline).open(request, timeout=timeout) as response:
            out = Response(response.status, _read(response), dict(response.headers))
    except urllib.error.HTTPError as e:
        out = Response(e.code, _read(e), dict(e.headers or {}))
    except Exception as e:  # name the type only: the text may hold the URL
        if deadline.expired:
            raise PostError(f"no complete answer within the {timeout:g} s deadline") from None
        reason = getattr(e, "reason", e)
        if isinstance(reason, str) or isinstance(e, ValueError | http.client.InvalidURL):
            raise PostError("the configured URL is malformed or unsupported",
                            config=True) from None
        errno = getattr(reason, "errno", None)
        raise PostError(f"network error {type(reason).__name__}"
                        + (f" (errno {errno})" if errno else "")) from None
    finally:
        deadline.timer.cancel()
    if deadline.expired:
        raise PostError(f"no complete answer within the {timeout:g} s deadline")
    return out
