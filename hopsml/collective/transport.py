"""TCP between ranks: the listening socket, the authenticated connections to one peer, and blocking I/O
with timeouts. How the connections are made (the challenge and the hello) is `handshake`.

Every pair of ranks shares two connections: a data connection that carries the collectives, and a
control connection that stays silent until a rank aborts; then it carries one notice saying why, so
that the rank at the other end can name the rank that really failed instead of the messenger.

Every message after the challenge is followed by a 16-byte tag (`hopsml.cluster.auth.MessageTags`: keyed per
connection and direction from the secret and both handshake nonces, counted per message). The receiver
checks it before the message is used, so bytes that something between the ranks altered, made up, sent
again or moved are refused (a CollectiveError naming the peer) before any header is acted on or any
pickle is loaded. A message is what one `send` call passes as one buffer; above 1 GiB it travels as
several tagged frames.
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import struct
import threading
from collections.abc import Callable, Sequence

import numpy as np

from hopsml.cluster.auth import TAG_BYTES, ConnectionKeys, MessageTags
from hopsml.errors import ClusterError, CollectiveError
from hopsml.net import Network

logger = logging.getLogger(__name__)

MAGIC = b"HMLC"  # starts the handshake's hello and every abort notice
_NOTICE = struct.Struct("!4sI")  # magic, length of the utf-8 text that follows

# Large buffers keep a whole pipeline segment in flight; they must be set before connect()/listen()
# so that TCP negotiates a window scale big enough to use them. The kernel caps them at
# net.core.wmem_max / rmem_max.
SOCKET_BUFFER_BYTES = 4 << 20
_NOTICE_TIMEOUT_S = 1.0
_MAX_NOTICE_BYTES = 1 << 16
_LISTEN_BACKLOG = 128
_FRAME_BYTES = 1 << 30  # a longer message is sent as frames of this size, each with its own tag; larger
# than any message that is read whole from the read-ahead buffer
# A small read (a header, a small payload, a tag) takes whatever has arrived, up to _READ_AHEAD bytes, in one
# syscall and serves the next reads from it: a small collective's messages cost one recv. A read of more
# than _SMALL_READ bytes goes straight into the caller's memory. A message whose length shows in its first
# bytes (`recv_message`: a header with its description and a small payload) must fit the read-ahead buffer.
_SMALL_READ = 16 << 10
_READ_AHEAD = 192 << 10


class PeerLost(Exception):
    """Internal: the connection to one peer failed; the communicator turns it into a CollectiveError.

    `tampered`: the peer's connection delivered a message whose tag does not match: the peer is probably
    alive, and something between the ranks altered, made up, repeated or reordered what it sent.
    """

    def __init__(self, peer: int, reason: str, *, timed_out: bool = False, tampered: bool = False) -> None:
        super().__init__(reason)
        self.peer = peer
        self.reason = reason
        self.timed_out = timed_out
        self.tampered = tampered


class Link:
    """One authenticated connection: the socket and the tag counters of its two directions."""

    __slots__ = ("sock", "send_tags", "recv_tags")

    def __init__(self, sock: socket.socket, keys: ConnectionKeys) -> None:
        self.sock = sock
        self.send_tags = MessageTags(keys.send)
        self.recv_tags = MessageTags(keys.recv)

    def seal(self, message: bytes) -> bytes:
        """A short message followed by its tag."""
        return message + self.send_tags.next_tag(message)

    def open(self, sealed: bytes) -> bytes | None:
        """The message of `seal`'s output, or None when its tag does not match."""
        message, tag = sealed[:-TAG_BYTES], sealed[-TAG_BYTES:]
        return message if self.recv_tags.check_next(message, tag) else None


def _byte_view(buffer: memoryview | bytes | bytearray) -> memoryview:
    view = memoryview(buffer)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _frames(view: memoryview) -> list[memoryview]:
    if len(view) <= _FRAME_BYTES:
        return [view]
    return [view[i:i + _FRAME_BYTES] for i in range(0, len(view), _FRAME_BYTES)]


def _tampered(peer: int, what: str) -> PeerLost:
    return PeerLost(peer, f"{what} from rank {peer} failed its authentication tag check: it was altered, made up, "
                          "sent again or reordered on the way", tampered=True)


def parse_address(address: str) -> tuple[str, int]:
    """'host:port' or '[v6host]:port' -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CollectiveError(f"rank address {address!r} is not of the form 'host:port'; "
                              "pass the addresses that collective.listen() returned, unchanged")
    return host.strip("[]"), int(port)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tune(sock: socket.socket) -> None:
    """Buffers, no Nagle delay, and keepalive so that a vanished host is noticed before the timeout."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
            except OSError:
                pass


def _set_nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def listen(host: str, port_range: tuple[int, int] | None = None) -> tuple[socket.socket, str]:
    """Open this rank's listening socket on `host` (a free port of `port_range`, else any); returns it and the
    address to share ("host:port").

    Keep the socket open and pass it to `Communicator.connect`: nobody else can take the port in between.
    """
    family, type_, proto, _, sockaddr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM,
                                                           flags=socket.AI_PASSIVE)[0]

    def make_socket() -> socket.socket:
        sock = socket.socket(family, type_, proto)
        tune(sock)  # accepted connections inherit the buffer sizes
        return sock

    try:
        listener = Network(port_range=port_range).bind(make_socket, str(sockaddr[0]), "a rank's collective listener")
    except ClusterError as exc:
        raise CollectiveError(str(exc)) from exc
    except OSError as exc:
        raise CollectiveError(f"cannot listen on {host!r}: {exc}; pass an address of this host "
                              "that the other ranks can reach") from exc
    try:
        listener.listen(_LISTEN_BACKLOG)
    except OSError as exc:
        listener.close()
        raise CollectiveError(f"cannot listen on {host!r}: {exc}") from exc
    return listener, format_address(host, listener.getsockname()[1])


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k
    return bytes(buf)


def _describe_os_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionResetError):
        return "connection reset by peer"
    if isinstance(exc, BrokenPipeError):
        return "peer closed the connection"
    if exc.errno == errno.ETIMEDOUT:
        return "connection timed out: the peer's host stopped answering"
    return exc.strerror or str(exc)


def _advance(views: list, n: int) -> None:
    """Drop the first n bytes of the buffer list (those a sendmsg sent or a recvmsg_into filled)."""
    while n:
        if n >= len(views[0]):
            n -= len(views.pop(0))
        else:
            views[0] = views[0][n:]
            n = 0


class TcpPeer:
    """The two connections to one other rank; blocking I/O whose every wait is bounded by the timeout, and
    whose every message is tagged by the sender and checked by the receiver before it is used."""

    def __init__(self, rank: int, data: Link, ctrl: Link, timeout_s: float) -> None:
        self.rank = rank
        self.timeout_s = timeout_s
        self._data_link, self._ctrl_link = data, ctrl
        self._data, self._ctrl = data.sock, ctrl.sock
        self._ctrl_lock = threading.Lock()
        self._ahead_bytes = bytearray(_READ_AHEAD)
        self._ahead = memoryview(self._ahead_bytes)
        self._ahead_start = self._ahead_end = 0
        self._reduce_buffer = np.empty(0, dtype=np.uint8)
        sock = self._data
        # Blocking sockets with kernel-side timeouts: one recvmsg(MSG_WAITALL) or sendmsg() call moves a whole
        # segment and its tag without a poll() before every syscall; a wait without progress ends with EAGAIN.
        sock.settimeout(None)
        seconds = int(timeout_s)
        timeval = struct.pack("ll", seconds, int((timeout_s - seconds) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        _set_nodelay(sock)

    def _lost(self, exc: OSError) -> PeerLost:
        if isinstance(exc, BlockingIOError):
            return PeerLost(self.rank, f"no progress for {self.timeout_s:g} s", timed_out=True)
        return PeerLost(self.rank, _describe_os_error(exc))

    def send(self, messages: Sequence[memoryview | bytes | bytearray]) -> None:
        """Send each buffer as one message, followed by its tag, all in one gathering syscall when possible.
        An empty buffer is no message: nothing is sent for it (and the receiver reads none)."""
        tags = self._data_link.send_tags
        views: list[memoryview | bytes] = []
        for buffer in messages:
            for frame in _frames(_byte_view(buffer)):
                if len(frame):
                    views += (frame, tags.next_tag(frame))
        try:
            while views:
                _advance(views, self._data.sendmsg(views))
        except OSError as exc:
            raise self._lost(exc) from None

    def _buffered(self, n: int) -> int:
        """Make the next n bytes of the stream (n <= the read-ahead size) available in the read-ahead buffer,
        reading whatever has arrived; returns where they start in it."""
        have = self._ahead_end - self._ahead_start
        if have >= n:
            return self._ahead_start
        if self._ahead_start + n > len(self._ahead_bytes):
            self._ahead_bytes[:have] = self._ahead_bytes[self._ahead_start:self._ahead_end]
            self._ahead_start, self._ahead_end = 0, have
        while self._ahead_end - self._ahead_start < n:
            try:
                k = self._data.recv_into(self._ahead[self._ahead_end:])
            except OSError as exc:
                raise self._lost(exc) from None
            if k == 0:
                raise PeerLost(self.rank, "peer closed the connection")
            self._ahead_end += k
        return self._ahead_start

    def _take_ahead(self, views: list[memoryview]) -> None:
        """Fill the views from the bytes read ahead, as far as they go; drops the views filled."""
        while views and self._ahead_start < self._ahead_end:
            view = views[0]
            k = min(len(view), self._ahead_end - self._ahead_start)
            view[:k] = self._ahead[self._ahead_start:self._ahead_start + k]
            self._ahead_start += k
            if k == len(view):
                views.pop(0)
            else:
                views[0] = view[k:]

    def _fill(self, views: list[memoryview]) -> None:
        """Fill the byte views, in order: first from what was read ahead, then straight from the socket."""
        views = [v for v in views if len(v)]
        self._take_ahead(views)
        sock = self._data
        while views:
            try:
                k = sock.recvmsg_into(views, 0, socket.MSG_WAITALL)[0]
            except OSError as exc:
                raise self._lost(exc) from None
            if k == 0:
                raise PeerLost(self.rank, "peer closed the connection")
            _advance(views, k)

    def recv_into(self, view: memoryview | bytearray) -> None:
        """Receive one message of exactly len(view) bytes into the view and check its tag; raises PeerLost
        (tampered) when the tag does not match: the view's content must then not be used."""
        view = _byte_view(view)
        n = len(view)
        if not n:
            return
        tags = self._data_link.recv_tags
        if n + TAG_BYTES <= _SMALL_READ:
            at = self._buffered(n + TAG_BYTES)
            ahead = self._ahead
            self._ahead_start += n + TAG_BYTES
            if not tags.check_next(ahead[at:at + n], ahead[at + n:at + n + TAG_BYTES]):
                raise _tampered(self.rank, f"a message of {n} bytes")
            view[:] = ahead[at:at + n]
            return
        tag = memoryview(bytearray(TAG_BYTES))
        for frame in _frames(view):
            self._fill([frame, tag])
            if not tags.check_next(frame, tag):
                raise _tampered(self.rank, f"a message of {len(frame)} bytes")

    def recv_message(self, first: int, rest: Callable[[memoryview], int]) -> bytes:
        """Receive one message whose length shows in its first `first` bytes: `rest` tells from them how many
        bytes follow (those first bytes are not yet authenticated, so `rest` may only size the read, which
        must fit the read-ahead buffer). Returns the whole message once its tag matched."""
        at = self._buffered(first)
        more = rest(self._ahead[at:at + first])
        if not 0 <= more <= len(self._ahead) - first - TAG_BYTES:
            raise _tampered(self.rank, f"a message announcing {more} more bytes")
        n = first + more
        at = self._buffered(n + TAG_BYTES)
        ahead = self._ahead
        self._ahead_start += n + TAG_BYTES
        if not self._data_link.recv_tags.check_next(ahead[at:at + n], ahead[at + n:at + n + TAG_BYTES]):
            raise _tampered(self.rank, f"a message of {n} bytes")
        return bytes(ahead[at:at + n])

    def recv_reduce(self, dst: np.ndarray, ufunc: np.ufunc) -> None:
        """Combine the peer's next message (dst.nbytes bytes) into dst with the ufunc: received into a buffer
        kept across calls, then combined in place."""
        n = dst.nbytes
        if self._reduce_buffer.size < n:
            self._reduce_buffer = np.empty(n, dtype=np.uint8)
        received = self._reduce_buffer[:n]
        self.recv_into(received.data)
        ufunc(dst, received.view(dst.dtype), out=dst)

    def send_notice(self, text: str) -> None:
        """Tell the peer why this rank aborts; best effort, bounded by a short timeout."""
        payload = text.encode("utf-8", "replace")[:_MAX_NOTICE_BYTES]
        with self._ctrl_lock:
            try:
                self._ctrl.settimeout(_NOTICE_TIMEOUT_S)
                self._ctrl.sendall(self._ctrl_link.seal(_NOTICE.pack(MAGIC, len(payload)) + payload))
            except OSError:
                pass

    def read_notice(self, wait_s: float = _NOTICE_TIMEOUT_S) -> str | None:
        """The abort notice the peer sent before it closed, or None if it sent none (it died)."""
        with self._ctrl_lock:
            try:
                self._ctrl.settimeout(wait_s)
                head = recv_exact(self._ctrl, _NOTICE.size)
                magic, length = _NOTICE.unpack(head)
                if magic != MAGIC or length > _MAX_NOTICE_BYTES:
                    logger.warning("rank %d's control connection carried bytes that are not an abort notice; "
                                   "ignored", self.rank)
                    return None
                notice = self._ctrl_link.open(head + recv_exact(self._ctrl, length + TAG_BYTES))
            except (OSError, ValueError):
                return None
        if notice is None:
            logger.warning("an abort notice from rank %d failed its authentication tag check (something between the "
                           "ranks altered or made it up); ignored", self.rank)
            return None
        return notice[_NOTICE.size:].decode("utf-8", "replace")

    def control_fd(self) -> int:
        """The control connection's descriptor: readable once the peer aborted, closed or died (compiled waits
        poll it as `signalled` does)."""
        return self._ctrl.fileno()

    def signalled(self) -> bool:
        """True once the peer wrote an abort notice or closed (its control connection is readable); does not
        block, so a rank can watch its peers while a GPU collective runs."""
        poller = select.poll()  # not select.select: executors can hold more than 1024 descriptors
        try:
            poller.register(self._ctrl, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def shutdown(self) -> None:
        """Wake any thread blocked on the data connection and make the peer see end-of-stream at once."""
        try:
            self._data.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        for sock in (self._data, self._ctrl):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
