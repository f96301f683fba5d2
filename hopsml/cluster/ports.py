"""Ports for the frameworks a rank hosts (TensorFlow's gRPC server in TF_CONFIG, torch.distributed's
MASTER_PORT), reserved so that nothing else takes them before the framework binds.

A framework binds its port itself, so hopsml cannot hand over a listening socket. Instead each port is
taken outside the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): ports there are
never given to an outgoing connection or to a `bind(port 0)`, so between hopsml's release and the
framework's bind only a program that asks for that very number could take it. The port stays bound
(not listening) through the rendezvous and while hopsml's own collective connects, and is released
only right before the user's function starts.
"""

from __future__ import annotations

import errno
import logging
import random
import socket
from dataclasses import dataclass, field

from hopsml.net import Network

log = logging.getLogger(__name__)

_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST = 10000  # below this live well-known and registered service ports
_ATTEMPTS = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for automatically assigned ports (Linux default when unreadable)."""
    try:
        with open(_RANGE_FILE, encoding="ascii") as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _candidates(rng: random.Random) -> list[int]:
    low, high = ephemeral_range()
    ranges = [r for r in ((_LOWEST, low - 1), (high + 1, 65535)) if r[1] - r[0] >= 100]
    ports: list[int] = []
    for first, last in ranges:
        ports += rng.sample(range(first, last + 1), min(_ATTEMPTS, last - first + 1))
    rng.shuffle(ports)
    return ports[:_ATTEMPTS]


def reserve_port(host: str, port_range: tuple[int, int] | None = None) -> socket.socket:
    """A socket bound (not listening) to a free port on `host` outside the ephemeral range, or in
    `port_range` when one is set (setting port_range).

    Falls back to a kernel-chosen port when none outside the range is free (then the usual small
    race with other processes remains, and is logged).
    """
    if port_range is not None:
        return Network(port_range=port_range).bind(
            lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), host, "a framework port")
    for port in _candidates(random.Random()):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
    log.warning("no free port outside the ephemeral range on %s; using one the kernel picks", host)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    return sock


@dataclass
class FrameworkPorts:
    """This rank's reserved ports: one for TF_CONFIG, and on rank 0 one for MASTER_PORT."""

    host: str
    framework: socket.socket
    master: socket.socket | None = None
    _released: bool = field(default=False, repr=False)

    @classmethod
    def reserve(cls, host: str, with_master: bool, port_range: tuple[int, int] | None = None) -> FrameworkPorts:
        framework = reserve_port(host, port_range)
        try:
            master = reserve_port(host, port_range) if with_master else None
        except BaseException:
            framework.close()
            raise
        return cls(host, framework, master)

    @property
    def framework_port(self) -> int:
        return int(self.framework.getsockname()[1])

    @property
    def master_port(self) -> int | None:
        return int(self.master.getsockname()[1]) if self.master is not None else None

    def release(self) -> None:
        """Free the ports for the framework to bind (call right before the user's function)."""
        if self._released:
            return
        self._released = True
        self.framework.close()
        if self.master is not None:
            self.master.close()
