"""The compiled same-host exchange (`_fastshm`, built from `_fastshm.c` where a C compiler was there at install):
every collective of ranks that all share one host starts with it, and a small all-reduce is done by it alone.

Each rank has a slot in the small area of the host segment (`host`); a collective's header (and a payload of at
most PAYLOAD_CAP bytes) goes into this rank's slot, then the rank waits until every other rank published the
same round: the header exchange of `exchange`, in one wait instead of a message to and from every peer. A small
all-reduce whose headers all agree is then combined in rank order straight out of the slots, in the same call
(publish, wait, reduce, release without Python between the steps). Anything else (headers that differ, a dtype
the compiled code does not combine, a payload too big for a slot) comes back to Python, which reads the slots
and goes on as the message exchange would.

Without the module (no compiler at install, not Linux, or HOPSML_COLLECTIVE_NATIVE=0 on any rank of the host)
the ranks exchange headers as messages over the shared-memory rings (`shm`): the pure-Python path, said once.
"""

from __future__ import annotations

import importlib
import logging
import mmap
import struct
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any

import numpy as np

from hopsml.collective.peers import Peer
from hopsml.collective.protocol import FIXED_SIZE, Header
from hopsml.collective.ring import SendJob, SendWorker
from hopsml.collective.transport import PeerLost

logger = logging.getLogger(__name__)

# the small area's layout, the C module's too (checked when it loads)
LINE = 64  # a member's counter (the futex word) and its sleepers' count
HEADER_AT = 64  # a slot half: header and payload lengths, the packed header here, the payload after it
HEADER_CAP = 4096
PAYLOAD_CAP = 64 << 10
HALF_BYTES = HEADER_AT + HEADER_CAP + PAYLOAD_CAP
_LENGTHS = struct.Struct("=II")
_DESC_ROOM = HEADER_CAP - FIXED_SIZE

# dtypes the compiled code combines (native byte order); others are combined by numpy from the slots
DTYPE_CODES = {np.dtype(t): code for code, t in enumerate(
    (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))}
OP_CODES = {"sum": 0, "mean": 1, "min": 2, "max": 3}
REDUCED, EXCHANGED, INELIGIBLE = 0, 1, 2
_CLOSED, _SIGNALLED, _TIMEOUT = -1, -2, -3


def _load() -> tuple[ModuleType | None, str]:
    try:  # by name: the compiled module imports nothing of hopsml
        _fastshm = importlib.import_module("hopsml.collective._fastshm")
    except ImportError as exc:
        return None, f"it is not built ({exc})"
    layout = (_fastshm.LINE, _fastshm.HEADER_AT, _fastshm.HEADER_CAP, _fastshm.PAYLOAD_CAP, _fastshm.HALF_BYTES)
    if layout != (LINE, HEADER_AT, HEADER_CAP, PAYLOAD_CAP, HALF_BYTES):
        return None, f"it was built for another layout {layout} (rebuild: pip install -e . or python setup.py " \
                     "build_ext --inplace)"
    return _fastshm, ""


_compiled, _missing = _load()
_told = False


def available() -> bool:
    """Whether the compiled module loaded; says once (a warning) when it did not, the first time it would serve."""
    global _told
    if _compiled is None and not _told:
        _told = True
        logger.warning("hopsml.collective: the compiled same-host path is missing (%s); ranks on one host use the "
                       "pure-Python path, tens of microseconds more per small all-reduce. Install hopsml where a C "
                       "compiler is available (apt-get install build-essential python3-dev; pip install .)", _missing)
    return _compiled is not None


def small_area_bytes(size: int) -> int:
    """Bytes of the small area for `size` members (a multiple of the page)."""
    return -(-(size * LINE + size * 2 * HALF_BYTES) // 4096) * 4096


class SmallArea:
    """One rank's side of the small area: the compiled Group, and the reading of the slots in Python."""

    def __init__(self, segment: mmap.mmap, small_at: int, closed_at: int, members: list[int], index: int,
                 peers: Mapping[int, Any], timeout_s: float) -> None:
        assert _compiled is not None
        self.members, self.index, self.size = members, index, len(members)
        fds = tuple(-1 if i == index else peers[r].control_fd() for i, r in enumerate(members))
        self.group: Any = _compiled.Group(segment, small_at, closed_at, index, len(members), fds, timeout_s)
        self.timeout_s = timeout_s
        self._halves = np.ndarray((self.size, 2, HALF_BYTES), np.uint8, buffer=segment,
                                  offset=small_at + self.size * LINE)
        self.shut = False

    def lost(self, status: int) -> PeerLost:
        """The PeerLost of a failed wait (a negative status)."""
        who = self.group.who
        if status == _CLOSED:
            if self.shut:
                return PeerLost(self.members[(self.index + 1) % self.size], "this rank shut its connections down")
            return PeerLost(who, "it aborted")
        if status == _SIGNALLED:
            return PeerLost(self.members[who], "peer closed the connection")
        if status == _TIMEOUT:
            return PeerLost(self.members[who], f"no progress for {self.timeout_s:g} s", timed_out=True)
        return PeerLost(self.members[(self.index + 1) % self.size], f"unexpected status {status}")

    def read(self, header: Header, packed: bytes, sink: Callable[[int, Header], memoryview | None] | None,
             big: dict[int, tuple[Header, memoryview]] | None = None) -> list[Header]:
        """Every member's header of the round just exchanged (this rank's own object where the bytes are the same,
        as `exchange` does), each inline payload given to `sink`; payloads too big for a slot are noted in `big`."""
        half = self.group.round & 1
        headers: list[Header] = [header] * self.size
        for i in range(self.size):
            if i == self.index:
                continue
            slot = self._halves[i, half]
            header_len, payload_len = _LENGTHS.unpack_from(slot)
            got = slot[HEADER_AT:HEADER_AT + header_len].tobytes()
            rank = self.members[i]
            if got == packed:
                theirs = header
            else:
                parsed = Header.unpack_fixed(got[:FIXED_SIZE]) if header_len >= FIXED_SIZE else None
                if parsed is None:
                    raise PeerLost(rank, "it published a slot that is not a collective header: the ranks are out "
                                         "of step")
                theirs = parsed[0]
                if parsed[1]:
                    theirs = replace(theirs, desc=got[FIXED_SIZE:FIXED_SIZE + parsed[1]].decode("utf-8", "replace"))
            if theirs.inline:
                target = sink(rank, theirs) if sink is not None else None
                if target is None or len(target) != theirs.inline:
                    target = memoryview(bytearray(theirs.inline))
                if theirs.inline == payload_len:
                    start = -(-(HEADER_AT + header_len) // 64) * 64
                    np.frombuffer(target, np.uint8)[:] = slot[start:start + payload_len]
                elif big is not None:
                    big[rank] = (theirs, target)
            headers[rank] = theirs
        return headers

    def exchange(self, header: Header, payload: memoryview | None, sink: Callable[[int, Header], memoryview | None]
                 | None, peers: Mapping[int, Peer], worker: SendWorker,
                 on_failure: Callable[[PeerLost], None]) -> list[Header]:
        """`exchange.exchange` through the slots: publish, wait for all, read. A payload bigger than a slot (an
        allgather's) follows over the peer connections, sent by the worker while this thread receives."""
        if len(header.desc) > _DESC_ROOM // 4:
            header = replace(header, desc=header.desc.encode("utf-8")[:_DESC_ROOM].decode("utf-8", "ignore"))
        packed = header.pack()
        inline = payload if header.inline and payload is not None and len(payload) <= PAYLOAD_CAP else None
        try:
            status = self.group.exchange(packed, -1, inline)
            if status < 0:
                raise self.lost(status)
            big: dict[int, tuple[Header, memoryview]] = {}
            headers = self.read(header, packed, sink, big)
        except PeerLost as lost:
            on_failure(lost)
            raise
        if header.inline > PAYLOAD_CAP or big:
            self._exchange_big(header, payload, big, peers, worker, on_failure)
        return headers

    def _exchange_big(self, header: Header, payload: memoryview | None, big: dict[int, tuple[Header, memoryview]],
                      peers: Mapping[int, Peer], worker: SendWorker, on_failure: Callable[[PeerLost], None]) -> None:
        job: SendJob | None = None
        if header.inline > PAYLOAD_CAP and payload is not None:
            def send_all() -> None:
                try:
                    for rank in sorted(peers):
                        peers[rank].send([payload])
                except PeerLost as lost:
                    on_failure(lost)
                    raise

            job = worker.submit(send_all)
        try:
            for rank, (_, target) in sorted(big.items()):
                peers[rank].recv_into(target)
        except PeerLost as lost:
            on_failure(lost)
            if job is not None:
                job.done.wait()
            raise
        if job is not None:
            job.finish()

    def shutdown(self) -> None:
        """This rank aborts: wake every sleeper (the segment's closed word is already set)."""
        self.shut = True
        self.group.wake()

    def close(self) -> None:
        del self._halves
        self.group.release()
