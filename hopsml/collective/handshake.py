"""Authenticated connection set-up between ranks: the higher rank dials the lower one, twice (a data and a
control connection).

Each connection first passes the `hopsml.cluster.auth` challenge, then the dialer says who it is in a tagged hello
(rank, the rank it dialed, world size, connection kind) and the listener answers with a tagged accept or reject. A
connection that fails the challenge is logged and closed, and the listener keeps waiting for the genuine
peer until the timeout. A flood of such connections logs one line per interval, with the count of those held
back. The result is one `transport.TcpPeer` per other rank.
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Sequence

from hopsml.cluster import auth
from hopsml.cluster.auth import TAG_BYTES
from hopsml.collective.ratelimit import RateLimitedWarning
from hopsml.collective.timeout import Timeout
from hopsml.collective.transport import MAGIC, Link, TcpPeer, parse_address, recv_exact, tune
from hopsml.errors import AuthenticationError, CollectiveError

logger = logging.getLogger(__name__)

DATA, CTRL = 0, 1
_KIND_NAMES = {DATA: "data", CTRL: "control"}
_HELLO = struct.Struct("!4sIIIB")  # magic, dialer rank, dialed rank, world size, kind
_ACCEPTED, _REJECTED = b"\x01", b"\x00"
_HANDSHAKE_TIMEOUT_S = 30.0


class _Acceptor:
    """Accepts the higher ranks' connections on a thread; each handshake runs on its own short-lived thread,
    so a silent or hostile connection cannot hold up the genuine peers."""

    def __init__(self, listener: socket.socket, secret: bytes, rank: int, size: int, timeout: Timeout) -> None:
        self._listener = listener
        self._secret = secret
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._expected = {(peer, kind) for peer in range(rank + 1, size) for kind in (DATA, CTRL)}
        self._found: dict[tuple[int, int], Link] = {}
        self._pending: set[socket.socket] = set()
        self._cond = threading.Condition()
        self._stopped = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._warnings = RateLimitedWarning(logger)
        self._thread = threading.Thread(target=self._run, name=f"hopsml-collective-accept-{rank}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select(timeout=self._timeout.remaining() + 1.0)}
                if self._wake_r in ready or self._timeout.expired():
                    return
                if self._listener in ready:
                    try:
                        conn, remote = self._listener.accept()
                    except OSError:
                        continue
                    with self._cond:
                        self._pending.add(conn)
                    threading.Thread(target=self._handshake, args=(conn, remote), daemon=True,
                                     name=f"hopsml-collective-handshake-{self._rank}").start()

    def _handshake(self, conn: socket.socket, remote: object) -> None:
        registered = False
        try:
            conn.settimeout(max(0.001, min(_HANDSHAKE_TIMEOUT_S, self._timeout.remaining())))
            link = Link(conn, auth.challenge(conn, self._secret))
            hello = link.open(recv_exact(conn, _HELLO.size + TAG_BYTES))
            if hello is None:
                raise AuthenticationError("its hello failed the authentication tag check: something between the "
                                          "ranks altered it")
            magic, peer, dialed, size, kind = _HELLO.unpack(hello)
            key = (peer, kind)
            with self._cond:
                problem = None
                if magic != MAGIC:
                    problem = "it does not speak the hopsml collective protocol"
                elif dialed != self._rank:
                    problem = f"rank {peer} meant to dial rank {dialed}, but this is rank {self._rank}"
                elif size != self._size:
                    problem = f"it believes the world has {size} ranks, this rank was told {self._size}"
                elif key not in self._expected:
                    problem = f"rank {peer} should not connect to rank {self._rank} on connection kind {kind}"
                elif key in self._found:
                    problem = f"rank {peer} already connected its {_KIND_NAMES[kind]} connection"
                elif self._stopped:
                    problem = "the rendezvous is over"
                if problem is None:
                    # the reply goes out before the link is handed over, so that no collective message can
                    # overtake it (a short write into an empty socket buffer)
                    conn.sendall(link.seal(_ACCEPTED))
                    self._found[key] = link
                    self._pending.discard(conn)
                    registered = True
                    self._cond.notify_all()
            if problem is not None:
                self._warnings.warning("rank %d refused an authenticated connection from %s: %s",
                                       self._rank, remote, problem)
                conn.sendall(link.seal(_REJECTED))
        except AuthenticationError as exc:
            self._warnings.warning("rank %d refused a connection from %s: %s", self._rank, remote, exc)
        except (OSError, struct.error) as exc:
            if self._stopped:  # cut off by stop(): the rendezvous is over, nothing to warn about
                logger.debug("rank %d cut off a handshake with %s at the end of the rendezvous", self._rank, remote)
            else:
                self._warnings.warning("rank %d dropped a connection from %s during the handshake: %s",
                                       self._rank, remote, exc)
        finally:
            if not registered:
                with self._cond:
                    self._pending.discard(conn)
                conn.close()

    def wait(self) -> dict[tuple[int, int], Link]:
        """Block until every higher rank connected both connections, or raise when the timeout passes."""
        with self._cond:
            while len(self._found) < len(self._expected):
                remaining = self._timeout.remaining()
                if remaining <= 0:
                    missing = sorted({peer for peer, _ in self._expected - self._found.keys()})
                    raise self._timeout.error(f"ranks {missing} never connected to rank {self._rank}")
                self._cond.wait(remaining)
            return dict(self._found)

    def stop(self) -> None:
        """Stop accepting; connections still in their handshake are cut off."""
        with self._cond:
            self._stopped = True
            pending = list(self._pending)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join()
        for conn in pending:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._wake_r.close()
        self._wake_w.close()
        self._warnings.flush(f"connections refused or dropped by rank {self._rank}")

    def close_found(self) -> None:
        with self._cond:
            for link in self._found.values():
                link.sock.close()


def _dial(address: str, timeout: Timeout) -> socket.socket:
    """Connect to a peer's listener; a refusal (full backlog) is retried with backoff until the deadline."""
    host, port = parse_address(address)
    delay = 0.02
    while True:
        try:
            family, type_, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, type_, proto)
        except OSError as exc:
            raise CollectiveError(f"cannot resolve rank address {address!r}: {exc}") from exc
        try:
            tune(sock)
            sock.settimeout(max(0.001, timeout.remaining()))
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            if timeout.remaining() <= delay:
                raise timeout.error(f"last error connecting to {address}: {exc}") from exc
            time.sleep(delay)
            delay = min(2 * delay, 0.5)


def _connect_to(peer: int, address: str, kind: int, rank: int, size: int, secret: bytes,
                timeout: Timeout) -> Link:
    sock = _dial(address, timeout)
    try:
        sock.settimeout(max(0.001, min(_HANDSHAKE_TIMEOUT_S, timeout.remaining())))
        link = Link(sock, auth.respond(sock, secret))
        sock.sendall(link.seal(_HELLO.pack(MAGIC, rank, peer, size, kind)))
        reply = link.open(recv_exact(sock, len(_ACCEPTED) + TAG_BYTES))
        if reply is None:
            raise CollectiveError(f"the answer of rank {peer} at {address} to rank {rank}'s "
                                  f"{_KIND_NAMES[kind]} connection failed its authentication tag check: "
                                  "something between the ranks altered it")
        if reply != _ACCEPTED:
            raise CollectiveError(f"rank {peer} at {address} refused rank {rank}'s {_KIND_NAMES[kind]} "
                                  "connection; its log says why (wrong world size or a duplicate rank)")
        return link
    except AuthenticationError as exc:
        sock.close()
        raise CollectiveError(f"the process listening at {address} (rank {peer}) failed authentication: {exc}; "
                              "every rank must be given the same secret and the addresses of this run") from exc
    except OSError as exc:
        sock.close()
        if timeout.expired():
            raise timeout.error(f"handshake with rank {peer} at {address}: {exc}") from exc
        raise CollectiveError(f"rank {rank} could not complete the handshake with rank {peer} at {address}: "
                              f"{exc}") from exc
    except BaseException:
        sock.close()
        raise


def connect_peers(rank: int, size: int, addresses: Sequence[str], listener: socket.socket | None,
                  secret: bytes, timeout_s: float) -> dict[int, TcpPeer]:
    """Build the authenticated full mesh; consumes (closes) the listener."""
    timeout = Timeout(timeout_s, f"the other {size - 1} ranks to connect to rank {rank}")
    if listener is None:
        raise CollectiveError(f"rank {rank} of {size} needs its listening socket; create it with "
                              "collective.listen(host) before the addresses are exchanged")
    acceptor = _Acceptor(listener, secret, rank, size, timeout)
    dialed: dict[tuple[int, int], Link] = {}
    try:
        for peer in range(rank):
            for kind in (DATA, CTRL):
                dialed[(peer, kind)] = _connect_to(peer, addresses[peer], kind, rank, size, secret, timeout)
        accepted = acceptor.wait()
    except BaseException:
        acceptor.stop()
        acceptor.close_found()
        for link in dialed.values():
            link.sock.close()
        listener.close()
        raise
    acceptor.stop()
    listener.close()
    links = {**dialed, **accepted}
    logger.debug("rank %d connected to its %d peers", rank, size - 1)
    return {peer: TcpPeer(peer, links[(peer, DATA)], links[(peer, CTRL)], timeout_s)
            for peer in range(size) if peer != rank}
