"""Where hopsml's own sockets listen: the network interface and port range of the `network_interface`
and `port_range` settings, for clusters with several networks or a firewall.

Pure standard library and no pyspark: the ranks (collective listeners, framework ports) and the
driver (its channel) both use it. The driver reads the settings once and hands the resulting
`Network` to its tasks, so every executor follows the driver's settings.
"""

from __future__ import annotations

import errno
import random
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hopsml import config
from hopsml.errors import ClusterError

_SIOCGIFADDR = 0x8915  # Linux ioctl: the IPv4 address of an interface


def interface_address(name: str) -> str:
    """The IPv4 address of network interface `name` on this host (an IP address is returned as it is)."""
    if config.is_ip_address(name):
        return name
    known = [n for _, n in socket.if_nameindex()]
    if name not in known:
        raise ClusterError(f"network interface {name!r} (setting network_interface) does not exist on "
                           f"{socket.gethostname()}; it has {', '.join(known)}. Name an interface every "
                           "Spark host has, or leave the setting empty")
    if not sys.platform.startswith("linux"):
        raise ClusterError(f"network_interface={name!r}: reading an interface's address needs Linux; "
                           "give the IP address instead")
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as exc:
            raise ClusterError(f"network interface {name!r} on {socket.gethostname()} has no IPv4 address "
                               f"({exc}); name an interface with one, or give an IP address") from exc
    return socket.inet_ntoa(packed[20:24])


@dataclass(frozen=True)
class Network:
    """The interface and port range hopsml's listening sockets use; empty values change nothing."""

    interface: str = ""
    port_range: tuple[int, int] | None = None

    @classmethod
    def from_settings(cls, settings: config.Settings | None = None) -> Network:
        """Read where the network is decided, on the driver (settings, else the environment)."""
        if settings is None:
            return cls(config.value("network_interface"), config.value("port_range"))
        return cls(settings.network_interface, settings.port_range)

    def host(self, default: str) -> str:
        """The address to listen on: the configured interface's on this host, else `default`."""
        return interface_address(self.interface) if self.interface else default

    def ports(self, rng: random.Random | None = None) -> Iterator[int]:
        """The ports of the range in random order (ranks sharing a host rarely collide); [0] without one."""
        if self.port_range is None:
            yield 0
            return
        low, high = self.port_range
        ports = list(range(low, high + 1))
        (rng or random.Random()).shuffle(ports)
        yield from ports

    def bind(self, make_socket: Callable[[], socket.socket], host: str, what: str) -> socket.socket:
        """A socket from `make_socket()` bound on `host` to a free port of the range (any port without
        one); its owner keeps it, so nobody can take the port before it listens."""
        for port in self.ports():
            sock = make_socket()
            try:
                sock.bind((host, port))
                return sock
            except OSError as exc:
                sock.close()
                if port == 0 or exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                    raise
        low, high = self.port_range or (0, 0)
        raise ClusterError(f"no free port for {what} on {host} in {low}-{high} (setting port_range): every one "
                           "is taken. Widen the range; each rank takes two or three ports and the driver one "
                           "per running experiment")
