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

Arrays beyond the last-level cache skip the segment where the kernel allows it (`cma`): each rank
publishes its array's address, combines its share reading the others' arrays in place (a cache-sized
piece at a time), then reads the other shares' results from their owners' arrays: about 2.5 bytes of
traffic per byte with 2 ranks instead of 5, and no limit on the size of a round. A third wait (all done
reading) keeps every array unchanged until no one reads it any more.

Waits are those of the shared-memory rings (`shm`): spin briefly, then sleep in a read of the idle TCP
data connection to the rank waited for, which rings one byte when it publishes; that read ends with the
collective timeout, or at once when that rank dies or aborts (its connections close). An aborting rank
also marks the segment closed, so that a waiter woken by anything names it.
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from hopsml.collective import cma, shm
from hopsml.collective.ring import UFUNCS, finisher
from hopsml.collective.transport import PeerLost

logger = logging.getLogger(__name__)

SEGMENT_BUDGET = 32 << 20  # bytes for the slots and the result area together (Docker gives /dev/shm 64 MiB)
DIRECT_CHUNK_BYTES = 256 << 10  # a peer's data is read in pieces this big, each combined while still in cache
_LINE = 64
_ARRIVED, _REDUCED, _DONE = 0, 1, 2
_KINDS = 3
_PID, _ADDRESS, _PROBE, _TOKEN = 0, 1, 2, 3  # a member's line of facts: uint64 indexes (the token takes two)


def slot_bytes_for(size: int) -> int:
    """Bytes per rank and round: the budget shared by size + 1 areas, between 1 and 16 MiB, page aligned."""
    per = SEGMENT_BUDGET // (size + 1)
    return max(1 << 20, min(16 << 20, per)) // 4096 * 4096


def _last_level_cache_bytes() -> int:
    """The CPU's largest cache (Linux sysfs), 32 MiB where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
            sizes.append(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text))
        except (OSError, ValueError, IndexError):
            continue
    return max(sizes, default=32 << 20)


def direct_min_bytes() -> int:
    """Arrays from this size are all-reduced by reading the members' arrays in place. Smaller ones are copied
    through the segment: those copies stay in the last-level cache, where a copy is several times faster
    than the kernel's cross-memory read (it pins every page). Measured on a 2-core EPYC with a 32 MiB L3:
    even at 8 MiB with 2 and with 4 ranks, so a quarter of that cache."""
    return _last_level_cache_bytes() // 4


def _control_layout(size: int) -> tuple[int, int, int, int]:
    """Offsets of the closed flag, the members' facts and the sleepers' flags (the counters come first), and
    the control area's page-aligned size."""
    closed = _KINDS * size * _LINE
    facts = closed + _LINE
    sleepers = facts + size * _LINE
    end = sleepers + _KINDS * size * size
    return closed, facts, sleepers, -(-end // 4096) * 4096


def _control_bytes(size: int) -> int:
    return _control_layout(size)[3]


def segment_size(size: int, slot_bytes: int) -> int:
    """The segment: control page(s), the result area, then one slot per rank."""
    return _control_bytes(size) + (size + 1) * slot_bytes


class HostGroup:
    """The same-host collectives of one rank among `members` (global ranks, in order); built by `attach`."""

    def __init__(self, members: list[int], rank: int, segment: mmap.mmap, slot_bytes: int,
                 peers: Mapping[int, object], timeout_s: float) -> None:
        self.members = members
        self.size = size = len(members)
        self.index = members.index(rank)
        self.slot_bytes, self.timeout_s = slot_bytes, timeout_s
        self._rank = rank
        self._segment = segment
        self._peers = peers
        closed, facts, sleepers, control = _control_layout(size)
        self._counters = np.ndarray((_KINDS, size, _LINE // 8), np.uint64, buffer=segment)
        self._closed = np.ndarray((1,), np.uint64, buffer=segment, offset=closed)
        self._facts = np.ndarray((size, _LINE // 8), np.uint64, buffer=segment, offset=facts)
        # sleepers[kind, i, j]: member j sleeps on member i's counter of that kind
        self._sleepers = np.ndarray((_KINDS, size, size), np.uint8, buffer=segment, offset=sleepers)
        self._result = np.ndarray((slot_bytes,), np.uint8, buffer=segment, offset=control)
        self._slots = [np.ndarray((slot_bytes,), np.uint8, buffer=segment, offset=control + (i + 1) * slot_bytes)
                       for i in range(size)]
        self._round = 0
        self._shut = False
        self._spin_s = shm.spin_seconds(size)
        self.direct = False  # whether large all-reduces read the members' arrays in place (`cma`); set by attach
        self._probe = np.frombuffer(secrets.token_bytes(16), np.uint64).copy()  # what the others read to probe it
        self._chunk = np.empty(DIRECT_CHUNK_BYTES, np.uint8)
        self._direct_min = direct_min_bytes()

    def publish_facts(self) -> None:
        """Write this member's process id and probe token where the others can see them."""
        line = self._facts[self.index]
        line[_PID] = os.getpid()
        line[_PROBE] = self._probe.ctypes.data
        line[_TOKEN:_TOKEN + 2] = self._probe

    def probe_members(self) -> bool:
        """Whether this member can read every other member's memory (each one's token, where it says it is)."""
        if not cma.supported():
            return False
        got = np.empty(2, np.uint64)
        for i in range(self.size):
            if i == self.index:
                continue
            line = self._facts[i]
            try:
                cma.read_into(int(line[_PID]), int(line[_PROBE]), got)
            except OSError as exc:
                logger.info("cannot read rank %d's memory (%s); the host's ranks copy through shared memory",
                            self.members[i], exc)
                return False
            if not np.array_equal(got, line[_TOKEN:_TOKEN + 2]):
                logger.info("rank %d's process id names another process here (another PID namespace?); the "
                            "host's ranks copy through shared memory", self.members[i])
                return False
        return True

    def _publish(self, kind: int, value: int) -> None:
        shm.fence()  # the data written before is visible before the counter
        self._counters[kind, self.index, 0] = value
        shm.fence()
        # a private copy: members set and clear their flags meanwhile, and numpy must not see them change
        sleepers = self._sleepers[kind, self.index].copy()
        if sleepers.any():
            for j in np.flatnonzero(sleepers):
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
        spin_end = time.perf_counter() + self._spin_s
        while time.perf_counter() < spin_end:
            if int(counter[0]) >= value:
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
        if self.direct and everyone and flat.nbytes >= self._direct_min:
            self._direct_allreduce(flat, op)
            return
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

    def _read(self, i: int, offset: int, dst: np.ndarray) -> None:
        """Copy member i's array bytes from `offset` into dst (its address came with its ARRIVED)."""
        line = self._facts[i]
        try:
            cma.read_into(int(line[_PID]), int(line[_ADDRESS]) + offset, dst)
        except OSError as exc:
            self._check_closed(i)
            raise PeerLost(self.members[i], f"its memory could not be read ({exc.strerror}): it has probably "
                                            "exited") from None

    def _direct_allreduce(self, flat: np.ndarray, op: str) -> None:
        """The same shares as the slot path, without copies through the segment: each member combines its share
        of the others' arrays read in place, cache-sized piece by piece, into its own array; then it reads the
        other shares' results from their owners' arrays. Three waits: all arrived (addresses published), all
        reduced, all done reading (only then may a member return and its array change)."""
        ufunc = UFUNCS[op]
        n, me = self.size, self.index
        itemsize = flat.dtype.itemsize
        bounds = [flat.size * i // n for i in range(n + 1)]
        self._round += 1
        k = self._round
        self._facts[me, _ADDRESS] = flat.ctypes.data
        self._publish(_ARRIVED, k)
        self._wait_all(_ARRIVED, k)
        share = flat[bounds[me]:bounds[me + 1]]
        per_chunk = max(1, DIRECT_CHUNK_BYTES // itemsize)
        chunk = self._chunk[:per_chunk * itemsize].view(flat.dtype)
        for start in range(0, share.size, per_chunk):
            mine = share[start:start + per_chunk]
            theirs = chunk[:mine.size]
            for i in range(n):
                if i != me:
                    self._read(i, (bounds[me] + start) * itemsize, theirs)
                    ufunc(mine, theirs, out=mine)
        finish = finisher(op, flat.dtype, n)
        if finish is not None:
            finish(share)
        self._publish(_REDUCED, k)
        for i in range(n):
            if i != me and bounds[i] < bounds[i + 1]:
                self._wait(_REDUCED, i, k)
                self._read(i, bounds[i] * itemsize, flat[bounds[i]:bounds[i + 1]])
        self._publish(_DONE, k)
        self._wait_all(_DONE, k)

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

    def close(self) -> None:
        if self._segment.closed:
            return
        del self._counters, self._closed, self._facts, self._sleepers, self._result, self._slots
        try:
            self._segment.close()
        except BufferError:
            logger.debug("the host segment stays mapped until its last view is gone")


def attach(rank: int, size: int, peers: Mapping[int, object], hosts: list[str], timeout_s: float,
           send: Callable[[object, str], None], recv: Callable[[object], str]) -> tuple[HostGroup | None, bool]:
    """Set up the segment of this host's ranks, where every pair of them shares memory; every rank calls it.

    Returns this rank's group (None when it is alone on its host or the segment could not be made), and
    whether every host with several ranks has its group: the condition for the hierarchical all-reduce.
    Within a host, its lowest rank creates the segment and sends its name; each member maps it and
    answers; the creator unlinks it and tells everyone whether all mapped it.
    """
    members = [r for r in range(size) if hosts[r] and hosts[r] == hosts[rank]] or [rank]
    group = None
    if len(members) > 1:
        group = _attach_members(rank, members, peers, timeout_s, send, recv)
    ready = group is not None or len(members) == 1
    for peer in peers.values():
        send(peer, "ready" if ready else "")
    everyone_ready = all(recv(peers[r]) == "ready" for r in sorted(peers)) and ready
    return group, everyone_ready


def _attach_members(rank: int, members: list[int], peers: Mapping[int, object], timeout_s: float,
                    send: Callable[[object, str], None], recv: Callable[[object], str]) -> HostGroup | None:
    others = [r for r in members if r != rank]
    everywhere = all(isinstance(peers[r], shm.ShmPeer) for r in others)
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
        name, segment = created if created else ("", None)
        group = HostGroup(members, rank, segment, slot_bytes, peers, timeout_s) if segment is not None else None
        try:
            if group is not None:
                group.publish_facts()
            for r in others:
                send(peers[r], name)
            answers = [recv(peers[r]) for r in others]
        except BaseException:
            if group is not None:
                group.close()
            raise
        finally:
            if created:
                shm._unlink(name)
        ok = group is not None and all(answer == "mapped" for answer in answers)
        for r in others:
            send(peers[r], "ok" if ok else "")
    else:
        name = recv(peers[creator])
        segment = shm._open_segment(name, nbytes) if name else None  # the creator unlinks it once all have it
        group = HostGroup(members, rank, segment, slot_bytes, peers, timeout_s) if segment is not None else None
        if group is not None:
            group.publish_facts()
        send(peers[creator], "mapped" if group is not None else "")
        ok = recv(peers[creator]) == "ok"
    if not ok:
        if group is not None:
            group.close()
        return None
    try:  # every member published its facts before it answered 'mapped': each can probe the others now
        readable = group.probe_members()
        if rank == creator:
            group.direct = all([recv(peers[r]) == "readable" for r in others]) and readable
            for r in others:
                send(peers[r], "direct" if group.direct else "")
        else:
            send(peers[creator], "readable" if readable else "")
            group.direct = recv(peers[creator]) == "direct"
    except BaseException:
        group.close()
        raise
    return group
