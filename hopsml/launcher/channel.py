"""An authenticated message channel between the driver and its tasks.

The driver listens; each task connects, passes the HMAC challenge with the experiment's secret, and
sends length-prefixed JSON messages (output lines, results, intermediate metrics); the driver can
answer on the same connection (e.g. "stop" for early stopping). No pickles cross it.

Every wait has a bound: sends time out when the peer stops reading, TCP keepalive ends a read from
a peer whose host vanished, and closing either end returns within its timeout even when the other
end is gone.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from hopsml.cluster import auth
from hopsml.errors import AuthenticationError
from hopsml.launcher.messages import Stop, decode
from hopsml.net import Network

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 64 << 20
_HANDSHAKE_TIMEOUT_S = 15.0
_SEND_TIMEOUT_S = 30.0        # a peer that reads nothing for this long is taken for gone
_POLL_S = 0.5                 # how often the accept and send loops look whether the channel closed
_OUTBOX_SIZE = 10_000
_KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))  # a dead host: ~60 s


def _bound(sock: socket.socket) -> None:
    """Put bounds on a connected socket's waits: sends time out, keepalive ends reads of a dead host.

    The socket stays blocking for reads (a task may rightly stay silent for hours); SO_SNDTIMEO
    makes a send to a peer that stopped reading fail instead of blocking forever.
    """
    seconds = int(_SEND_TIMEOUT_S)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                    struct.pack("ll", seconds, int((_SEND_TIMEOUT_S - seconds) * 1e6)))
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in _KEEPALIVE:
        if hasattr(socket, name):  # Linux; other systems keep their keepalive defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


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


def _listen(host: str, port_range: tuple[int, int] | None) -> socket.socket:
    """The driver's listening socket on `host`, on a free port of `port_range` (any port without one)."""
    family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]

    def make_socket() -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as socket.create_server does
        return sock

    server = Network(port_range=port_range).bind(make_socket, host, "the driver channel")
    try:
        server.listen()
    except OSError:
        server.close()
        raise
    return server


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

    def __init__(self, host: str, secret: bytes, on_message: Callable[[dict[str, Any], Connection], None],
                 port_range: tuple[int, int] | None = None,
                 on_close: Callable[[Connection], None] | None = None) -> None:
        self.secret = secret
        self._on_message, self._on_close = on_message, on_close
        self._server = _listen(host, port_range)
        self._server.settimeout(_POLL_S)  # accept wakes up to see a close
        self.address = (host, self._server.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._sockets_lock = threading.Lock()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="hopsml-channel", daemon=True)
        self._accept_thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, peer = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            threading.Thread(target=self._serve, args=(sock, peer), daemon=True).start()

    def _serve(self, sock: socket.socket, peer: object) -> None:
        try:
            sock.settimeout(_HANDSHAKE_TIMEOUT_S)
            auth.challenge(sock, self.secret)
            sock.settimeout(None)
            _bound(sock)
        except (AuthenticationError, OSError) as exc:
            log.warning("refused a connection from %s: %s", peer, exc)
            sock.close()
            return
        with self._sockets_lock:
            if self._closed.is_set():
                sock.close()
                return
            self._sockets.add(sock)
        connection = Connection(sock)
        try:
            while (message := _recv(sock)) is not None:
                self._on_message(message, connection)
        except (OSError, ValueError) as exc:
            if not self._closed.is_set():
                log.debug("channel connection from %s ended: %s", peer, exc)
        finally:
            with self._sockets_lock:
                self._sockets.discard(sock)
            sock.close()
            if self._on_close is not None:  # a long-lived task's end: what it ran has ended with it
                self._on_close(connection)

    def close(self) -> None:
        """Stop accepting and end every connection; returns at once (the loops end on their own)."""
        self._closed.set()
        self._server.close()
        with self._sockets_lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TaskChannel:
    """A task's end: sends without blocking the training loop; receives driver messages in order."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        _bound(sock)
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=_OUTBOX_SIZE)
        self._gone = threading.Event()     # the driver end is gone: nothing more can be sent
        self.ended = threading.Event()     # nothing more comes from the driver (its end closed)
        self._closing = threading.Event()
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self._sender = threading.Thread(target=self._send_loop, name="hopsml-channel-send", daemon=True)
        self._sender.start()
        threading.Thread(target=self._recv_loop, name="hopsml-channel-recv", daemon=True).start()

    @classmethod
    def connect(cls, address: tuple[str, int], secret: bytes, timeout_s: float = _HANDSHAKE_TIMEOUT_S
                ) -> TaskChannel | None:
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

    def stop_requested(self) -> bool:
        """Whether the driver asked this task to stop (its `Stop` message arrived); reads what came so far."""
        stop = False
        while not self.inbox.empty():
            stop = isinstance(decode(self.inbox.get_nowait()), Stop) or stop
        return stop

    def send(self, message: dict[str, Any]) -> None:
        if self._gone.is_set():
            return  # the driver is gone: the output is in the log files
        try:
            self._outbox.put_nowait(message)
        except queue.Full:
            pass  # a driver that cannot keep up loses live output, never the training

    def _send_loop(self) -> None:
        try:
            while True:
                try:
                    message = self._outbox.get(timeout=_POLL_S)
                except queue.Empty:
                    if self._closing.is_set():
                        return
                    continue
                if message is None:
                    return
                _send(self._sock, message)
        except OSError as exc:  # reset, closed, or a driver that read nothing for _SEND_TIMEOUT_S
            log.debug("channel to the driver ended: %s", exc)
        finally:
            self._gone.set()

    def _recv_loop(self) -> None:
        try:
            while (message := _recv(self._sock)) is not None:
                self.inbox.put(message)
        except (OSError, ValueError):
            pass
        finally:
            self.ended.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is queued for at most `timeout_s`, then close; returns also when the driver is gone."""
        deadline = time.monotonic() + timeout_s
        self._closing.set()
        if not self._gone.is_set():
            try:
                self._outbox.put(None, timeout=timeout_s)
            except queue.Full:
                log.debug("channel queue still full after %.1fs; closing without flushing it", timeout_s)
            self._sender.join(max(0.0, deadline - time.monotonic()))
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
