"""An authenticated message channel between the driver and its tasks.

The driver listens; each task connects, passes the HMAC challenge with the experiment's secret, and
sends length-prefixed JSON messages (output lines, results, intermediate metrics); the driver can
answer on the same connection (e.g. "stop" for early stopping). No pickles cross it.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import struct
import threading
from typing import Any, Callable

from hopsml import auth
from hopsml.errors import AuthenticationError

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 64 << 20
_HANDSHAKE_TIMEOUT_S = 15.0


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, default=str).encode("utf-8")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> dict[str, Any] | None:
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > _MAX_MESSAGE:
        raise ConnectionError(f"message of {size} bytes exceeds the channel limit")
    body = _recv_exact(sock, size)
    return None if body is None else json.loads(body)


class Connection:
    """The driver's end of one task's connection."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            try:
                _send(self._sock, message)
            except OSError:
                pass  # the task is gone; nothing to tell it any more


class DriverChannel:
    """Listens on the driver host; calls `on_message(message, connection)` for each message."""

    def __init__(self, host: str, secret: bytes, on_message: Callable[[dict[str, Any], Connection], None]) -> None:
        self.secret = secret
        self._on_message = on_message
        self._server = socket.create_server((host, 0))
        self.address = (host, self._server.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept_loop, name="hopsml-channel", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, peer = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock, peer), daemon=True).start()

    def _serve(self, sock: socket.socket, peer: Any) -> None:
        try:
            sock.settimeout(_HANDSHAKE_TIMEOUT_S)
            auth.challenge(sock, self.secret)
            sock.settimeout(None)
        except (AuthenticationError, OSError) as exc:
            log.warning("refused a connection from %s: %s", peer, exc)
            sock.close()
            return
        self._sockets.append(sock)
        connection = Connection(sock)
        try:
            while (message := _recv(sock)) is not None:
                self._on_message(message, connection)
        except (OSError, ValueError) as exc:
            if not self._closed.is_set():
                log.debug("channel connection from %s ended: %s", peer, exc)
        finally:
            sock.close()

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TaskChannel:
    """A task's end: sends without blocking the training loop; receives driver messages in order."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=10_000)
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self._sender = threading.Thread(target=self._send_loop, name="hopsml-channel-send", daemon=True)
        self._sender.start()
        threading.Thread(target=self._recv_loop, name="hopsml-channel-recv", daemon=True).start()

    @classmethod
    def connect(cls, address: tuple[str, int], secret: bytes, timeout_s: float = _HANDSHAKE_TIMEOUT_S
                ) -> "TaskChannel | None":
        """Connect to the driver, or None (with a warning) when it cannot be reached."""
        try:
            sock = socket.create_connection(address, timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            auth.respond(sock, secret)
            sock.settimeout(None)
        except (OSError, AuthenticationError) as exc:
            log.warning("cannot reach the driver at %s:%s (%s); output is kept in the log files only",
                        *address, exc)
            return None
        return cls(sock)

    def send(self, message: dict[str, Any]) -> None:
        try:
            self._outbox.put_nowait(message)
        except queue.Full:
            pass  # a driver that cannot keep up loses live output, never the training

    def _send_loop(self) -> None:
        while (message := self._outbox.get()) is not None:
            try:
                _send(self._sock, message)
            except OSError:
                return

    def _recv_loop(self) -> None:
        try:
            while (message := _recv(self._sock)) is not None:
                self.inbox.put(message)
        except (OSError, ValueError):
            pass

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is queued, then close."""
        self._outbox.put(None)
        self._sender.join(timeout_s)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
