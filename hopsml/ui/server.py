"""The web view's HTTP server: werkzeug's threaded server, with the limits a server on a shared machine needs.

werkzeug gives every connection a thread and waits on it for ever, so a client that opens connections and
sends nothing (or a byte now and then) holds a thread each, without end. Here a connection that stays idle for
`IDLE_TIMEOUT_S` is closed, a request's line and headers must all arrive within `HEAD_DEADLINE_S` of its
first read however slowly they trickle (a timer shuts the socket), and at most `MAX_CONNECTIONS` are open at
once: one more is answered 503 and closed at once, so the threads stay bounded and the view keeps answering
the others. One peer (an address, and on a loopback address a Unix user) holds at most `MAX_PER_PEER` of them.

On a loopback address a connection from another local user is answered 403 and closed before its request is
read (access.py says why): the peer socket's owner is looked up in /proc/net/tcp and tcp6, where the kernel lists
every TCP socket of the host with its uid. Where that table cannot be read, the token alone guards the view.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from typing import Any

HEAD_DEADLINE_S = 30.0
IDLE_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 64
MAX_PER_PEER = 32
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
         b"Content-Length: 40\r\n\r\nhopsml ui: too many open connections\r\n\r\n")
_FOREIGN_TEXT = b"hopsml ui: this view serves only the user who started it\n"
_FOREIGN = (b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(_FOREIGN_TEXT)).encode() + b"\r\n\r\n" + _FOREIGN_TEXT)


def _proc_address(host: str, port: int) -> str:
    """An address as /proc/net/tcp{,6} writes it: the address's 32-bit words in host byte order, in hex."""
    packed = ipaddress.ip_address(host.split("%", 1)[0]).packed
    words = [packed[i:i + 4] for i in range(0, len(packed), 4)]
    return "".join(int.from_bytes(word, "little").to_bytes(4, "big").hex().upper() for word in words) + \
        f":{port:04X}"


def peer_uid(connection: socket.socket) -> int | None:
    """The uid that owns the other end of a connection from this host (None: not found, or no /proc)."""
    try:
        peer, here = connection.getpeername()[:2], connection.getsockname()[:2]
        local, remote = _proc_address(*peer), _proc_address(*here)
    except (OSError, ValueError):
        return None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as given:
                next(given, None)
                for line in given:
                    fields = line.split()
                    if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return address == "localhost"


def make_server(host: str, port: int, app: Any, fd: int) -> Any:
    """A threaded server of `app` on the listening socket `fd` (see the module docstring)."""
    from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

    class Handler(WSGIRequestHandler):
        def setup(self) -> None:
            type(self).timeout = IDLE_TIMEOUT_S   # each read of the connection, between and within requests
            super().setup()

        def handle_one_request(self) -> None:
            timer = threading.Timer(HEAD_DEADLINE_S, self._expire)
            timer.daemon = True
            self._head_timer = timer
            timer.start()
            try:
                super().handle_one_request()
            finally:
                timer.cancel()

        def parse_request(self) -> bool:
            parsed = bool(super().parse_request())   # reads the headers too
            self._head_timer.cancel()   # the head is in: the page may take its time
            return parsed

        def _expire(self) -> None:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)   # the blocked read ends; the thread goes
            except OSError:
                pass

    class Server(ThreadedWSGIServer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._open: dict[Any, tuple[str, int | None]] = {}
            self._per_peer: dict[tuple[str, int | None], int] = {}
            self._lock = threading.Lock()
            self._uid = os.getuid()
            self._loopback = _loopback(host)

        def process_request(self, request: Any, client_address: Any) -> None:
            uid = peer_uid(request) if self._loopback else None
            if uid is not None and uid != self._uid:
                self._refuse(request, _FOREIGN)
                return
            peer = (client_address[0] if isinstance(client_address, tuple) else "", uid)
            with self._lock:
                busy = len(self._open) >= MAX_CONNECTIONS or self._per_peer.get(peer, 0) >= MAX_PER_PEER
                if not busy:
                    self._open[request] = peer
                    self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
            if busy:
                self._refuse(request, _BUSY)
                return
            super().process_request(request, client_address)

        def _refuse(self, request: Any, answer: bytes) -> None:
            try:
                request.sendall(answer)
            except OSError:
                pass
            super().shutdown_request(request)

        def shutdown_request(self, request: Any) -> None:
            with self._lock:
                peer = self._open.pop(request, None)
                if peer is not None:
                    self._per_peer[peer] -= 1
                    if not self._per_peer[peer]:
                        del self._per_peer[peer]
            super().shutdown_request(request)

        @property
        def open_connections(self) -> int:
            with self._lock:
                return len(self._open)

    return Server(host, port, app, Handler, fd=fd)
