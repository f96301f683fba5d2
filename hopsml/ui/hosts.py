"""Which Host names `hopsml ui` answers, against DNS rebinding.

A web page on attacker.example can make its name resolve to 127.0.0.1 and then read the view
from the victim's browser: the request reaches the local server, but its Host header still says
attacker.example. The view answers only the names it was started for: the address it listens
on and this machine's loopback names, with its port, plus names given with ``--allow-host``
(any port, for a reverse proxy).

>>> policy = HostPolicy.for_server("127.0.0.1", 5151, ["hops.example.org"])
>>> [policy.allows(h) for h in ("127.0.0.1:5151", "LOCALHOST:5151", "[::1]:5151", "hops.example.org")]
[True, True, True, True]
>>> [policy.allows(h) for h in ("attacker.example:5151", "localhost:80", "localhost", "")]
[False, False, False, False]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]")


def _name(host: str) -> str:
    """A host name as compared: lower case, no trailing dot, IPv6 addresses in brackets."""
    host = host.strip().lower().rstrip(".")
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _split(header: str) -> tuple[str, str | None]:
    """(name, port or None) of a Host header value.

    >>> _split("[::1]:5151"), _split("Example.org."), _split("a.b:80")
    (('[::1]', '5151'), ('example.org', None), ('a.b', '80'))
    """
    header = header.strip().lower()
    if header.startswith("["):
        name, _, rest = header.partition("]")
        port = rest[1:] if rest.startswith(":") else None
        return name + "]", port
    name, sep, port = header.rpartition(":")
    if not sep:
        return _name(header), None
    return _name(name), port


@dataclass(frozen=True)
class HostPolicy:
    """The Host header values a server answers: exact ``name:port`` pairs, and names on any port."""

    with_port: frozenset[str]
    any_port: frozenset[str] = frozenset()

    @classmethod
    def for_server(cls, bound: str, port: int, extra: Iterable[str] = ()) -> HostPolicy:
        """The listening address (unless it is every address) and the loopback names with `port`,
        and the names in `extra` on any port."""
        names = set(LOOPBACK_NAMES)
        if _name(bound) not in _ANY_ADDRESS:
            names.add(_name(bound))
        pairs = {f"{name}:{port}" for name in names}
        if port == 80:   # browsers leave the default port out
            pairs |= names
        return cls(frozenset(pairs), frozenset(_name(n) for n in extra if n.strip()))

    @classmethod
    def loopback(cls) -> HostPolicy:
        """The loopback names on any port: for an application served by something else (tests)."""
        return cls(frozenset(), frozenset(LOOPBACK_NAMES))

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        name, port = _split(header)
        if name in self.any_port:
            return True
        return (f"{name}:{port}" if port is not None else name) in self.with_port
