"""A TCP proxy on 127.0.0.1 that stalls the server's replies: a slow or partitioned network
between a node and PostgreSQL, for the cluster ledger's fault tests.

Every connection is forwarded as is until the client sends `trigger` (bytes of a statement, e.g.
b"mt_claim("); from then on the server's bytes to that client are held `stall` seconds
before they are forwarded. Other connections (a later one for a refusal's note) are not stalled
unless they send the trigger too.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator


class StallProxy:
    def __init__(self, upstream_port: int, trigger: bytes, stall: float):
        self.upstream_port, self.trigger, self.stall = upstream_port, trigger, stall
        self.stalled = 0  # connections whose replies were held
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, dsn: str) -> str:
        """`dsn` (keyword=value, host 127.0.0.1) through this proxy."""
        return " ".join(f"port={self.port}" if word.startswith("port=") else word
                        for word in dsn.split())

    def _accept(self) -> None:
        for client in _accepted(self._listener, self._stop):
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            triggered = threading.Event()
            for src, dst, from_client in ((client, server, True), (server, client, False)):
                threading.Thread(target=_pump, daemon=True, args=(
                    src, dst, self._stop, self._watch(triggered, from_client))).start()

    def _watch(self, triggered: threading.Event, from_client: bool) -> Callable[[bytes], None]:
        """What one direction does with each chunk before forwarding it: the client's side
        looks for the trigger, the server's holds its first chunk after it `stall` s."""
        seen, held = b"", False

        def on_data(data: bytes) -> None:
            nonlocal seen, held
            if from_client and not triggered.is_set():
                seen = (seen + data)[-(len(data) + len(self.trigger)):]
                if self.trigger in seen:
                    triggered.set()
            if not from_client and triggered.is_set() and not held:
                held = True
                self.stalled += 1
                self._stop.wait(self.stall)
        return on_data

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


class HoldingProxy:
    """A TCP proxy on 127.0.0.1 to `upstream_port` that can hold everything on demand: while
    held, the bytes of every connection, either way, and a new connection's first bytes, are
    received (the proxy's kernel acknowledges them) and kept until `release()`. A stalled
    middlebox, not a link down: the client's keepalives and `tcp_user_timeout` see a healthy
    peer, so only its own deadline on each step ends the wait. `hold_open()` holds only the
    connections open now (a listener's), letting new ones through."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self._flowing = threading.Event()
        self._flowing.set()
        self._stop = threading.Event()
        self._open: list[threading.Event] = []  # each connection's own flow, set: flowing
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        self._flowing.clear()

    def hold_open(self) -> None:
        for flow in list(self._open):
            flow.clear()

    def release(self) -> None:
        self._flowing.set()
        for flow in list(self._open):
            flow.set()

    def _accept(self) -> None:
        for client in _accepted(self._listener, self._stop):
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()  # a connection made while held: nothing reaches the server yet
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        flow = threading.Event()
        flow.set()
        self._open.append(flow)
        for src, dst in ((client, server), (server, client)):
            threading.Thread(target=_pump, daemon=True, args=(
                src, dst, self._stop,
                lambda _data: (self._flowing.wait(), flow.wait()))).start()

    def close(self) -> None:
        self._stop.set()
        self.release()
        self._listener.close()


def _shut_down(*sockets: socket.socket) -> None:
    """Both ends of a pumped connection: the peer of a closed side sees it closed too."""
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _pump(src: socket.socket, dst: socket.socket, stop: threading.Event,
          on_data: Callable[[bytes], object]) -> None:
    """Forward src's bytes to dst, each chunk after on_data(chunk) returned."""
    try:
        while not stop.is_set():
            data = src.recv(65536)
            if not data:
                break
            on_data(data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _shut_down(src, dst)


def _accepted(listener: socket.socket, stop: threading.Event) -> Iterator[socket.socket]:
    """Each connection to listener, until stop (or the listener closed)."""
    while not stop.is_set():
        try:
            yield listener.accept()[0]
        except OSError:
            return
