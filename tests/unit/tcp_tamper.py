"""An on-path attacker for tests: a TCP forwarder between a dialing rank and the rank it dials, which
rewrites chosen bytes of the stream one way (flip, inject, replay, reorder)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

UP, DOWN = "up", "down"  # up: from the dialer to the dialed rank


@dataclass
class Rewrite:
    """Once `nbytes` more bytes went past, replace them by fn(those bytes); nbytes=0 fires on the next bytes."""

    nbytes: int
    fn: Callable[[bytes], bytes]
    done: threading.Event = field(default_factory=threading.Event)


class _Pump:
    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.rules: list[Rewrite] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        buf = b""
        try:
            while chunk := self.src.recv(1 << 20):
                buf += chunk
                while True:
                    with self.lock:
                        rule = self.rules[0] if self.rules else None
                    if rule is None:
                        self.dst.sendall(buf)
                        buf = b""
                        break
                    if len(buf) < max(rule.nbytes, 1):
                        break
                    out = rule.fn(buf[:rule.nbytes])
                    buf = buf[rule.nbytes:]
                    with self.lock:
                        self.rules.pop(0)
                    rule.done.set()
                    self.dst.sendall(out)
        except OSError:
            pass
        finally:
            try:
                self.dst.sendall(buf)
                self.dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass


class TamperProxy:
    """Listens on 127.0.0.1; every connection it accepts is forwarded to `target` ('host:port')."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._pumps: list[dict[str, _Pump]] = []
        self._pending: dict[tuple[int, str], list[Rewrite]] = {}
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pumps = {UP: _Pump(client, upstream), DOWN: _Pump(upstream, client)}
            with self._lock:
                index = len(self._pumps)
                for direction, pump in pumps.items():
                    pump.rules.extend(self._pending.pop((index, direction), []))
                self._pumps.append(pumps)
                self._sockets += [client, upstream]
            for pump in pumps.values():
                pump.thread.start()

    def rewrite(self, connection: int, direction: str, rule: Rewrite) -> Rewrite:
        """Arm a rewrite on the `connection`-th accepted connection (0 is the first), also before it exists."""
        with self._lock:
            if connection < len(self._pumps):
                pump = self._pumps[connection][direction]
                with pump.lock:
                    pump.rules.append(rule)
            else:
                self._pending.setdefault((connection, direction), []).append(rule)
        return rule

    def close(self) -> None:
        self._server.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
