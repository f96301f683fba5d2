"""All-reduce through one shared segment, for ranks that are all on the same host.

The ring moves every byte through n - 1 hand-offs; on one host the ranks can instead meet in one segment:
a slot per rank and a result area. Large arrays go round by round, `slot_bytes` at a time:

1. each rank copies its data into its slot (all but its own share: only it reads that) and raises its
   `arrived` counter;
2. rank r combines share r (1/n of the round) of every rank's data into its own array and copies the
   result into the result area, then raises `reduced`;
3. each rank copies the other shares of the result into its array.

One rank computes each share and every rank copies that result, so all ranks hold identical bits.
Each rank moves about 4.5 bytes of memory traffic per byte of data with 4 ranks (the ring about 6.75),
and waits twice per round instead of once per segment. A round reuses the slots only after every rank
has passed the wait that follows their last use, so no extra synchronisation is needed.

Waits are those of the shared-memory rings (`shm`): spin briefly, then sleep in a read of the idle TCP
data connection to the rank waited for, which rings one byte when it publishes; that read ends with the
collective timeout, or at once when that rank dies or aborts (its connections close). An aborting rank
also marks the segment closed, so that a waiter woken by anything names it.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from hopsml.collective import native, shm
from hopsml.collective.peers import Peer
from hopsml.collective.ring import UFUNCS, finisher
from hopsml.collective.transport import PeerLost

logger = logging.getLogger(__name__)

SEGMENT_BUDGET = 32 << 20  # at most this many bytes for the slots and the result area together
_LINE = 64
_ARRIVED, _REDUCED = 0, 1


def _last_level_cache_bytes() -> int:
    """The CPU's largest cache (Linux sysfs), 32 MiB where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
            sizes.append(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text))
        except (OSError, ValueError, IndexError, KeyError):
            continue
    return max(sizes, default=32 << 20)


def slot_bytes_for(size: int) -> int:
    """Bytes per rank and round: a sixteenth of the last-level cache, so that a round's slots, result and
    arrays stay in it (the next round then reuses cached slots), within the segment budget; page aligned.
    Measured with a 32 MiB L3, 2 and 4 ranks, 4-256 MiB: 2 MiB rounds beat 1 MiB (more waits) and 4-10 MiB
    (memory traffic) by up to 2x."""
    per = min(_last_level_cache_bytes() // 16, SEGMENT_BUDGET // (size + 1))
    return max(256 << 10, per) // 4096 * 4096


def _control_bytes(size: int) -> int:
    counters = 2 * size * _LINE
    sleepers = 2 * size * size
    return -(-(counters + _LINE + sleepers) // 4096) * 4096


def segment_size(size: int, slot_bytes: int) -> int:
    """The segment: control page(s), the result area, one slot per rank, then the small area (`native`)."""
    return _small_at(size, slot_bytes) + native.small_area_bytes(size)


def _small_at(size: int, slot_bytes: int) -> int:
    return _control_bytes(size) + (size + 1) * slot_bytes


class HostGroup:
    """The same-host collectives of one rank among `members` (global ranks, in order); built by `attach`."""

    def __init__(self, members: list[int], rank: int, segment: mmap.mmap, slot_bytes: int,
                 peers: Mapping[int, shm.ShmPeer], timeout_s: float) -> None:
        self.members = members
        self.size = size = len(members)
        self.index = members.index(rank)
        self.slot_bytes, self.timeout_s = slot_bytes, timeout_s
        self._rank = rank
        self._segment = segment
        self._peers = peers
        control = _control_bytes(size)
        self._counters = np.ndarray((2, size, _LINE // 8), np.uint64, buffer=segment)
        self._closed = np.ndarray((1,), np.uint64, buffer=segment, offset=2 * size * _LINE)
        # sleepers[kind, i, j]: member j sleeps on member i's counter of that kind
        self._sleepers = np.ndarray((2, size, size), np.uint8, buffer=segment, offset=2 * size * _LINE + _LINE)
        self._my_sleepers = [memoryview(self._sleepers[kind, self.index]) for kind in (_ARRIVED, _REDUCED)]
        self._nobody = bytes(size)
        self._result = np.ndarray((slot_bytes,), np.uint8, buffer=segment, offset=control)
        self._slots = [np.ndarray((slot_bytes,), np.uint8, buffer=segment, offset=control + (i + 1) * slot_bytes)
                       for i in range(size)]
        self._round = 0
        self._shut = False
        self.small: native.SmallArea | None = None  # the compiled small exchange, once every member agreed

    def enable_small(self) -> None:
        """Start the compiled small exchange (`native`): every member calls it, or none."""
        self.small = native.SmallArea(self._segment, _small_at(self.size, self.slot_bytes), 2 * self.size * _LINE,
                                      self.members, self.index, self._peers, self.timeout_s)

    def _publish(self, kind: int, value: int) -> None:
        shm.fence()  # the data written before is visible before the counter
        self._counters[kind, self.index, 0] = value
        shm.fence()
        sleepers = bytes(self._my_sleepers[kind])  # a private copy: members set and clear their flags meanwhile
        if sleepers != self._nobody:
            for j, flag in enumerate(sleepers):
                if flag:
                    self._peers[self.members[j]].ring_bell()

    def _check_closed(self, i: int) -> None:
        if self._shut:
            raise PeerLost(self.members[i], "this rank shut its connections down")
        aborted = int(self._closed[0])
        if aborted:  # the rank that aborted: it sent its notice before it closed the segment
            raise PeerLost(aborted - 1, "it aborted")

    def _wait(self, kind: int, i: int, value: int) -> None:
        """Wait until member i's counter of this kind reached `value`."""
        counter = self._counters[kind, i]
        if int(counter[0]) >= value:
            return
        if shm.poll(lambda: int(counter[0]), lambda v: v >= value) is not None:
            return
        peer = self._peers[self.members[i]]
        self._sleepers[kind, i, self.index] = 1
        shm.fence()
        try:
            while int(counter[0]) < value:
                self._check_closed(i)
                peer.wait_bell()  # a bell rung for an earlier wait just loops once more
        finally:
            self._sleepers[kind, i, self.index] = 0

    def _wait_all(self, kind: int, value: int) -> None:
        for i in range(self.size):
            if i != self.index:
                self._wait(kind, i, value)

    def _views(self, dtype: np.dtype) -> tuple[int, np.ndarray, list[np.ndarray]]:
        per_round = self.slot_bytes // dtype.itemsize
        return (per_round, self._result[:per_round * dtype.itemsize].view(dtype),
                [s[:per_round * dtype.itemsize].view(dtype) for s in self._slots])

    def allreduce(self, flat: np.ndarray, op: str, everyone: bool = True) -> None:
        """All-reduce the 1-D contiguous array in place among the members; with everyone=False only the first
        member (the host's leader) gets the result (a reduce, before `broadcast_from_leader`)."""
        ufunc = UFUNCS[op]
        n, me = self.size, self.index
        finish = finisher(op, flat.dtype, n)
        per_round, result, slots = self._views(flat.dtype)
        mine = slots[me]
        for start in range(0, flat.size, per_round):
            m = min(per_round, flat.size - start)
            data = flat[start:start + m]
            bounds = [m * i // n for i in range(n + 1)]
            a, b = bounds[me], bounds[me + 1]
            self._round += 1
            k = self._round
            mine[:a] = data[:a]
            mine[b:m] = data[b:]
            self._publish(_ARRIVED, k)
            self._wait_all(_ARRIVED, k)
            share = data[a:b]
            for i in range(n):
                if i != me:
                    ufunc(share, slots[i][a:b], out=share)
            if finish is not None:
                finish(share)
            result[a:b] = share
            self._publish(_REDUCED, k)
            self._wait_all(_REDUCED, k)
            if everyone or me == 0:
                data[:a] = result[:a]
                data[b:] = result[b:m]

    def broadcast_from_leader(self, flat: np.ndarray) -> None:
        """Copy the first member's array into every member's, in place, through the leader's slot."""
        per_round, _, slots = self._views(flat.dtype)
        leader = slots[0]
        last = 0
        for start in range(0, flat.size, per_round):
            m = min(per_round, flat.size - start)
            data = flat[start:start + m]
            self._round += 1
            k = last = self._round
            if self.index == 0:
                if k > 1:  # the members have copied the previous round out of the slot
                    self._wait_all(_ARRIVED, k - 1)
                leader[:m] = data
                self._publish(_REDUCED, k)
            else:
                self._wait(_REDUCED, 0, k)
                data[...] = leader[:m]
                self._publish(_ARRIVED, k)
        if self.index == 0 and last:  # the slot is free again before the next collective writes it
            self._wait_all(_ARRIVED, last)

    def shutdown(self) -> None:
        """Wake every waiter on this host: this rank aborts."""
        self._shut = True
        if self._segment.closed:
            return
        if not self._closed[0]:
            self._closed[0] = self._rank + 1
        shm.fence()  # members asleep on this rank's bell wake when the communicator shuts the connections down
        if self.small is not None:
            self.small.shutdown()

    def close(self) -> None:
        if self._segment.closed:
            return
        if self.small is not None:
            self.small.close()
            self.small = None
        for view in self._my_sleepers:
            view.release()
        del self._counters, self._closed, self._sleepers, self._my_sleepers, self._result, self._slots
        try:
            self._segment.close()
        except BufferError:
            logger.debug("the host segment stays mapped until its last view is gone")


def attach(rank: int, size: int, peers: Mapping[int, Peer], hosts: list[str], timeout_s: float,
           send: Callable[[Peer, str], None],
           recv: Callable[[Peer], str], compiled: bool = False) -> tuple[HostGroup | None, bool]:
    """Set up the segment of this host's ranks, where every pair of them shares memory; every rank calls it.

    Returns this rank's group (None when it is alone on its host or the segment could not be made), and
    whether every host with several ranks has its group: the condition for the hierarchical all-reduce.
    Within a host, its lowest rank creates the segment and sends its handle (`shm.Created`); each member
    maps it and answers; the creator closes its descriptor and tells everyone whether all mapped it.
    """
    members = [r for r in range(size) if hosts[r] and hosts[r] == hosts[rank]] or [rank]
    group = None
    if len(members) > 1:
        group = _attach_members(rank, members, peers, timeout_s, send, recv)
    ready = group is not None or len(members) == 1
    mine = ("ready compiled" if compiled and group is not None else "ready") if ready else ""
    for peer in peers.values():
        send(peer, mine)
    answers = {r: recv(peers[r]) for r in sorted(peers)}
    everyone_ready = all(a.startswith("ready") for a in answers.values()) and ready
    if group is not None and group.size == size and mine == "ready compiled" and \
            all(a == "ready compiled" for a in answers.values()):
        group.enable_small()  # all ranks on this host, all with the compiled exchange: they all start it
    return group, everyone_ready


def _attach_members(rank: int, members: list[int], peers: Mapping[int, Peer], timeout_s: float,
                    send: Callable[[Peer, str], None],
                    recv: Callable[[Peer], str]) -> HostGroup | None:
    others = [r for r in members if r != rank]
    same_host = {r: peer for r in others if isinstance(peer := peers[r], shm.ShmPeer)}
    everywhere = len(same_host) == len(others)
    for r in others:
        send(peers[r], "all" if everywhere else "")
    answers = [recv(peers[r]) for r in others]
    if not everywhere or any(answer != "all" for answer in answers):
        return None  # some pair of this host talks over TCP (it could not share memory)
    slot_bytes = slot_bytes_for(len(members))
    nbytes = segment_size(len(members), slot_bytes)
    creator = members[0]
    if rank == creator:
        created = shm._create_segment(nbytes)
        try:
            for r in others:
                send(peers[r], created.handle if created else "")
            answers = [recv(peers[r]) for r in others]
        except BaseException:
            if created:
                created.mapping.close()
            raise
        finally:
            if created:
                created.release()
        ok = created is not None and all(answer == "mapped" for answer in answers)
        for r in others:
            send(peers[r], "ok" if ok else "")
        segment = created.mapping if created else None
    else:
        handle = recv(peers[creator])
        segment = shm._open_segment(handle, nbytes) if handle else None  # the creator's descriptor: open meanwhile
        send(peers[creator], "mapped" if segment is not None else "")
        ok = recv(peers[creator]) == "ok"
    if not ok or segment is None:
        if segment is not None:
            segment.close()
        return None
    return HostGroup(members, rank, segment, slot_bytes, same_host, timeout_s)
