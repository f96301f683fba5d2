"""Per-experiment secrets, the HMAC challenge that every hopsml connection must pass, and the keys that
authenticate each message sent after it.

The challenge proves that both ends know the experiment's secret. It also leaves both ends with two fresh
nonces, one chosen by each side, from which `challenge` and `respond` derive a key per direction of that
one connection. `MessageTags` computes a tag over every message sent after the handshake with those keys
and a message counter, so that a message that was forged, altered, replayed or reordered on the way is
refused by the receiver.

Tags are AES-128-GCM with the message as associated data and nothing encrypted (GMAC): a nonce never
repeats under a key because the key belongs to one direction of one connection and the nonce is that
direction's message counter. It is the cheapest sound MAC here (`python bench/mac.py` on the 2-core test
machine: 0.7-1 us for a header or a 4 KiB message and about 21 GB/s for a 512 KiB pipeline segment, against
1.6 GB/s for HMAC-SHA256, 0.9 GB/s for keyed BLAKE2b and 10-12 GB/s for Poly1305, whose one-time key per
message also costs 3-7 us), and OpenSSL computes it without holding the GIL, so a rank's send thread tags
while its receive thread is in a socket call or checking a tag (two threads: about 30 GB/s together).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from dataclasses import dataclass, field

from hopsml.errors import AuthenticationError

_NONCE_BYTES = 32
_DIGEST = hashlib.sha256
_DIGEST_BYTES = _DIGEST().digest_size
_KEY_LABEL = b"hopsml message keys v1 "
_MESSAGE_KEY_BYTES = 16  # AES-128
TAG_BYTES = 16
_COUNTER = struct.Struct("!4xQ")  # the 96-bit GCM nonce: 32 zero bits, then the 64-bit message counter


def new_secret() -> bytes:
    """A fresh random secret for one experiment."""
    return os.urandom(32)


def sign(secret: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of the concatenated parts under the secret."""
    mac = hmac.new(secret, digestmod=_DIGEST)
    for part in parts:
        mac.update(part)
    return mac.digest()


@dataclass(frozen=True)
class ConnectionKeys:
    """The message keys of one connection as one end sees it: `send` for its own messages, `recv` for the
    other end's."""

    send: bytes = field(repr=False)
    recv: bytes = field(repr=False)


def _connection_keys(secret: bytes, server_nonce: bytes, client_nonce: bytes, *, server: bool) -> ConnectionKeys:
    """Both directions' keys, bound to the secret and to the two nonces of this very handshake."""
    to_client, to_server = (sign(secret, _KEY_LABEL, direction, server_nonce, client_nonce)[:_MESSAGE_KEY_BYTES]
                            for direction in (b"server->client", b"client->server"))
    return ConnectionKeys(to_client, to_server) if server else ConnectionKeys(to_server, to_client)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AuthenticationError("peer closed the connection during authentication")
        buf += chunk
    return bytes(buf)


def challenge(sock: socket.socket, secret: bytes) -> ConnectionKeys:
    """Server side: make the connecting peer prove it knows the secret (mutual, replay-safe); returns the
    keys for the messages that follow on this connection."""
    nonce = os.urandom(_NONCE_BYTES)
    sock.sendall(nonce)
    peer_nonce, answer = _recv_exact(sock, _NONCE_BYTES), _recv_exact(sock, _DIGEST_BYTES)
    if not hmac.compare_digest(answer, sign(secret, b"client", nonce)):
        raise AuthenticationError("peer failed the HMAC challenge: it does not know this experiment's secret")
    sock.sendall(sign(secret, b"server", peer_nonce))
    return _connection_keys(secret, nonce, peer_nonce, server=True)


def respond(sock: socket.socket, secret: bytes) -> ConnectionKeys:
    """Client side: answer the server's challenge and check the server knows the secret too; returns the
    keys for the messages that follow on this connection."""
    nonce = _recv_exact(sock, _NONCE_BYTES)
    own_nonce = os.urandom(_NONCE_BYTES)
    sock.sendall(own_nonce + sign(secret, b"client", nonce))
    if not hmac.compare_digest(_recv_exact(sock, _DIGEST_BYTES), sign(secret, b"server", own_nonce)):
        raise AuthenticationError("server failed the HMAC challenge: it does not know this experiment's secret")
    return _connection_keys(secret, nonce, own_nonce, server=False)


class MessageTags:
    """The tags of one direction of one connection: message i is tagged with counter i, so the receiver,
    counting the same way, refuses a message that was altered, made up, sent again or moved.

    Use one instance per direction and end (the sender's and the receiver's count in step); not thread-safe:
    each direction is driven by one thread at a time.
    """

    __slots__ = ("_aead", "count")

    def __init__(self, key: bytes) -> None:
        try:  # imported here: only connections need it, and `import hopsml` stays light
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise AuthenticationError("authenticating the messages between ranks needs the cryptography package, "
                                      "a dependency of hopsml: pip install 'cryptography>=42'") from exc
        self._aead = AESGCM(key)
        self.count = 0

    def next_tag(self, message: bytes | bytearray | memoryview) -> bytes:
        """The tag of the next message (and count it)."""
        nonce = _COUNTER.pack(self.count)
        self.count += 1
        return self._aead.encrypt(nonce, b"", message)

    def check_next(self, message: bytes | bytearray | memoryview, tag: bytes | bytearray | memoryview) -> bool:
        """True when `tag` is the tag of the next message and `message` is what it covers (counts it either way)."""
        return hmac.compare_digest(self.next_tag(message), tag)
