"""What the collectives need from the connection to one other rank, whichever way the bytes travel: TCP
(`transport.TcpPeer`) or a shared-memory ring on the same host (`shm.ShmPeer`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

Buffer = memoryview | bytes | bytearray


class Peer(Protocol):
    """The data and control connections to one other rank; every wait is bounded by `timeout_s` and ends in
    `transport.PeerLost` when the peer dies, aborts, stalls or something tampers with its messages."""

    rank: int
    timeout_s: float

    def send(self, messages: Sequence[Buffer]) -> None:
        """Send each buffer as one message."""

    def recv_into(self, view: memoryview | bytearray) -> None:
        """Receive one message of exactly len(view) bytes into the view."""

    def recv_message(self, first: int, rest: Callable[[memoryview], int]) -> bytes:
        """Receive one message whose length shows in its first `first` bytes (`rest` says how many follow)."""

    def recv_reduce(self, dst: np.ndarray, ufunc: np.ufunc) -> None:
        """Combine the peer's next message of dst.nbytes bytes into dst with the ufunc."""

    def send_notice(self, text: str) -> None:
        """Tell the peer why this rank aborts (control connection; best effort)."""

    def read_notice(self, wait_s: float = 1.0) -> str | None:
        """The abort notice the peer sent, or None if it sent none."""

    def signalled(self) -> bool:
        """Whether the peer aborted or closed; never blocks."""

    def shutdown(self) -> None:
        """Wake any thread of this rank waiting on the peer, and make the peer see the end at once."""

    def close(self) -> None:
        """Close the connections."""
