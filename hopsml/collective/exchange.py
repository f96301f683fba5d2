"""The header exchange that starts every collective: each rank sends every peer its header (and a small
payload inside the same message), in a pairwise schedule (at step k, send to rank+k and receive from rank-k)
so that no two ranks wait on each other, and reads theirs. Every message is authenticated before any field
of it is used (see `transport`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from hopsml.collective.peers import Peer
from hopsml.collective.protocol import FIXED_SIZE, Header
from hopsml.collective.ring import SendJob, SendWorker
from hopsml.collective.transport import PeerLost

SMALL_BYTES = 64 << 10  # up to this size a collective is one direct exchange instead of a path
MERGED_INLINE_BYTES = SMALL_BYTES  # an inline payload up to this size travels in its header's message

Sink = Callable[[int, Header], "memoryview | None"]


def _header_message_rest(fixed: memoryview) -> int:
    """How many bytes of its message follow a header's fixed part (see Header.message_rest)."""
    return Header.message_rest(fixed, MERGED_INLINE_BYTES)


def matches(mine: Header, theirs: Header) -> bool:
    """Whether a peer's header asks for exactly what this rank's does (the inline size aside)."""
    return (theirs.kind, theirs.seq, theirs.op, theirs.root, theirs.desc, theirs.nbytes, theirs.error) == \
        (mine.kind, mine.seq, mine.op, mine.root, mine.desc, mine.nbytes, mine.error)


def exchange(peers: Mapping[int, Peer], rank: int, size: int, header: Header, worker: SendWorker,
             on_failure: Callable[[PeerLost], None], payload: memoryview | None = None,
             sink: Sink | None = None) -> list[Header]:
    """Send our header (and inline payload) to every peer and read theirs, in rank order; `sink` says where a
    peer's inline payload goes (None: read and drop it). Raises PeerLost after `on_failure` saw it."""
    n, me = size, rank
    packed = header.pack()
    if 0 < header.inline <= MERGED_INLINE_BYTES and payload is not None:  # one message: one tag, one recv
        message: list[bytes | memoryview] = [b"".join((packed, payload))]
    else:
        message = [packed] + ([payload] if header.inline and payload is not None else [])
    job: SendJob | None = None
    if sum(len(part) for part in message) <= SMALL_BYTES + 4096:
        for k in range(1, n):  # fits in the socket buffers: no need to receive concurrently
            peers[(me + k) % n].send(message)
    else:
        def send_all() -> None:
            try:
                for k in range(1, n):
                    peers[(me + k) % n].send(message)
            except PeerLost as lost:
                on_failure(lost)
                raise

        job = worker.submit(send_all)
    headers: list[Header] = [header] * n
    try:
        for k in range(1, n):
            other = (me - k) % n
            peer = peers[other]
            # the header, its description and a small payload are one message (a larger payload is
            # another): authenticated before any field of it is used
            got = peer.recv_message(FIXED_SIZE, _header_message_rest)
            if got.startswith(packed):  # the common case: the peer asks for exactly what this rank does
                theirs, desc_end = header, len(packed)
            else:
                parsed = Header.unpack_fixed(got[:FIXED_SIZE])
                if parsed is None:
                    raise PeerLost(other, "it sent a message that is not a collective header: the ranks are out "
                                          "of step")
                theirs, desc_end = parsed[0], FIXED_SIZE + parsed[1]
                if desc_end > FIXED_SIZE:
                    theirs = replace(theirs, desc=got[FIXED_SIZE:desc_end].decode("utf-8", "replace"))
            if theirs.inline:
                target = sink(other, theirs) if sink is not None else None
                if target is None or len(target) != theirs.inline:
                    target = memoryview(bytearray(theirs.inline))
                if theirs.inline <= MERGED_INLINE_BYTES:
                    target[:] = memoryview(got)[desc_end:]
                else:
                    peer.recv_into(target)
            headers[other] = theirs
    except PeerLost as lost:
        on_failure(lost)
        if job is not None:
            job.done.wait()
        raise
    if job is not None:
        job.finish()
    return headers
