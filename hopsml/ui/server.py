"""The web view's HTTP server: werkzeug's threaded server, with the limits a server on a shared machine needs.

werkzeug gives every connection a thread and waits on it for ever, so a client that opens connections and
sends nothing (or a byte now and then) holds a thread each, without end. Here a connection that stays idle for
`IDLE_TIMEOUT_S` is closed, a request's line and headers must all arrive within `HEAD_DEADLINE_S` of its
first read however slowly they trickle (a timer shuts the socket), and at most `MAX_CONNECTIONS` are open at
once: one more is answered 503 and closed at once, so the threads stay bounded and the view keeps answering
the others.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

HEAD_DEADLINE_S = 30.0
IDLE_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 64
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
         b"Content-Length: 40\r\n\r\nhopsml ui: too many open connections\r\n\r\n")


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
            self._open: set[Any] = set()
            self._lock = threading.Lock()

        def process_request(self, request: Any, client_address: Any) -> None:
            with self._lock:
                busy = len(self._open) >= MAX_CONNECTIONS
                if not busy:
                    self._open.add(request)
            if busy:
                try:
                    request.sendall(_BUSY)
                except OSError:
                    pass
                super().shutdown_request(request)
                return
            super().process_request(request, client_address)

        def shutdown_request(self, request: Any) -> None:
            with self._lock:
                self._open.discard(request)
            super().shutdown_request(request)

        @property
        def open_connections(self) -> int:
            with self._lock:
                return len(self._open)

    return Server(host, port, app, Handler, fd=fd)
