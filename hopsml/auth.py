"""Per-experiment secrets and the HMAC challenge that every hopsml connection must pass."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket

from hopsml.errors import AuthenticationError

_NONCE_BYTES = 32
_DIGEST = hashlib.sha256
_DIGEST_BYTES = _DIGEST().digest_size


def new_secret() -> bytes:
    """A fresh random secret for one experiment."""
    return os.urandom(32)


def sign(secret: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of the concatenated parts under the secret."""
    mac = hmac.new(secret, digestmod=_DIGEST)
    for part in parts:
        mac.update(part)
    return mac.digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AuthenticationError("peer closed the connection during authentication")
        buf += chunk
    return bytes(buf)


def challenge(sock: socket.socket, secret: bytes) -> None:
    """Server side: make the connecting peer prove it knows the secret (mutual, replay-safe)."""
    nonce = os.urandom(_NONCE_BYTES)
    sock.sendall(nonce)
    peer_nonce, answer = _recv_exact(sock, _NONCE_BYTES), _recv_exact(sock, _DIGEST_BYTES)
    if not hmac.compare_digest(answer, sign(secret, b"client", nonce)):
        raise AuthenticationError("peer failed the HMAC challenge: it does not know this experiment's secret")
    sock.sendall(sign(secret, b"server", peer_nonce))


def respond(sock: socket.socket, secret: bytes) -> None:
    """Client side: answer the server's challenge and check the server knows the secret too."""
    nonce = _recv_exact(sock, _NONCE_BYTES)
    own_nonce = os.urandom(_NONCE_BYTES)
    sock.sendall(own_nonce + sign(secret, b"client", nonce))
    if not hmac.compare_digest(_recv_exact(sock, _DIGEST_BYTES), sign(secret, b"server", own_nonce)):
        raise AuthenticationError("server failed the HMAC challenge: it does not know this experiment's secret")
