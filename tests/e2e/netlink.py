"""A network link of our own between the host and one container: a network namespace and a veth
pair with a /30 of 169.254.x.y (link-local, routed only over this veth), so that a test can cut
the container off (link down: its traffic dropped, no clean close) and bring it back.

Only the two addresses of the /30 are ever used: PostgreSQL (in the host's network) listens on the
host side's address, the node in the namespace connects to it. The namespace and both ends of
the veth are deleted by `delete()` (call it in a finally).

`LoopbackRelay` lets the node keep reaching the fake alert API on 127.0.0.1: it listens on the
namespace's own 127.0.0.1:port and relays each connection to the host's 127.0.0.1:port (loopback
on both sides; the veth going down does not cut alerts, only the database).
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed (exit {result.returncode}): "
                           f"{result.stderr.strip()}")
    return result


def _used_link_local() -> set[str]:
    out = _ip("-4", "-o", "addr", "show").stdout
    return {field.split("/")[0] for field in out.split() if field.startswith("169.254.")}


class VethLink:
    """Namespace `name` (under /run/netns) holding the inside end of a veth; the outside end is
    in the host's network. host_addr / node_addr: the /30's two usable addresses."""

    def __init__(self, tag: str) -> None:
        pid = os.getpid()
        self.name = f"mt-{tag}-{pid}"
        # interface names are at most 15 characters
        self.outside, self.inside = f"mtv{pid % 100000}h", f"mtv{pid % 100000}n"
        used = _used_link_local()
        for third in range(10 + pid % 150, 250):  # 169.254.169.x and .0.x are never used
            if third == 169:
                continue
            host, node = f"169.254.{third}.1", f"169.254.{third}.2"
            if host not in used and node not in used:
                self.host_addr, self.node_addr = host, node
                break
        else:
            raise RuntimeError("no free 169.254.x.0/30 for the test's veth")
        self.created = False

    @property
    def path(self) -> Path:
        """For systemd-nspawn --network-namespace-path."""
        return Path("/run/netns") / self.name

    def create(self) -> VethLink:
        self.created = True
        _ip("netns", "add", self.name)
        _ip("link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        _ip("link", "set", self.inside, "netns", self.name)
        _ip("addr", "add", f"{self.host_addr}/30", "dev", self.outside)
        _ip("link", "set", self.outside, "up")
        _ip("-n", self.name, "addr", "add", f"{self.node_addr}/30", "dev", self.inside)
        _ip("-n", self.name, "link", "set", self.inside, "up")
        _ip("-n", self.name, "link", "set", "lo", "up")
        return self

    def down(self) -> None:
        """The node vanishes from the network: its end goes down (nothing is sent, no FIN/RST)."""
        _ip("-n", self.name, "link", "set", self.inside, "down")

    def up(self) -> None:
        _ip("-n", self.name, "link", "set", self.inside, "up")
        # the route of the /30 comes back with the link; nothing else to restore

    def delete(self) -> None:
        """Both ends of the veth and the namespace (idempotent, never raises)."""
        if not self.created:
            return
        _ip("link", "del", self.outside, check=False)  # deletes the peer too
        _ip("-n", self.name, "link", "del", self.inside, check=False)
        _ip("netns", "del", self.name, check=False)
        self.created = False

    def __enter__(self) -> VethLink:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.delete()


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class LoopbackRelay:
    """127.0.0.1:port inside the link's namespace -> 127.0.0.1:port of the host (threads of
    this process; the listening socket stays in the namespace it was made in)."""

    def __init__(self, link: VethLink, port: int) -> None:
        self.link, self.port = link, port
        self.listener: socket.socket | None = None
        self.stopped, self.done = threading.Event(), threading.Event()

    def start(self) -> LoopbackRelay:
        made = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            # setns changes only this thread's network namespace: make the listener inside,
            # then come back, so that the connections it opens are the host's
            host = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            inside = os.open(self.link.path, os.O_RDONLY)
            try:
                _setns(inside)
                try:
                    self.listener = socket.create_server(("127.0.0.1", self.port))
                finally:
                    _setns(host)
            except BaseException as e:  # reported by start()
                failure.append(e)
                return
            finally:
                os.close(host)
                os.close(inside)
                made.set()
            listener = self.listener
            listener.settimeout(0.5)  # stop() is seen within half a second
            while not self.stopped.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                conn.settimeout(None)
                threading.Thread(target=self._relay, args=(conn,), daemon=True).start()
            listener.close()
            self.done.set()

        threading.Thread(target=serve, daemon=True).start()
        made.wait(10)
        if failure:
            raise failure[0]
        return self

    def _relay(self, conn: socket.socket) -> None:
        try:
            out = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        except OSError:
            conn.close()
            return
        out.settimeout(None)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                    try:
                        sock.shutdown(how)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(out, conn), daemon=True)
        back.start()
        pump(conn, out)
        back.join(30)
        conn.close()
        out.close()

    def stop(self) -> None:
        """Close the listener (its port in the namespace is free again once this returns)."""
        if self.listener is None:
            return
        self.stopped.set()
        self.done.wait(5)
        self.listener = None
