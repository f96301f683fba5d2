"""How a large all-reduce moves its data: one path object per communicator, chosen once at connect from where
the ranks are (which share a host, and whether each host's ranks could map one segment).

- `HostSegment` ('host'): every rank is on this host and they all mapped its segment (`host`): the ranks meet
  in it, one hand-off per byte.
- `Hierarchical` ('hierarchical'): several hosts, at least one of them with several ranks, and every such host
  has its segment: reduce within each host to its leader, ring across one leader per host, broadcast within
  each host.
- `Ring` ('ring'): the pipelined ring over the peer connections, whatever they are (shared-memory rings on
  one host, TCP across hosts or with shared memory turned off).

Small all-reduces do not reach a path: they travel inside the header exchange (see `communicator`). The GPU
path (NCCL, or host-staged) is `device`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from hopsml.collective.host import HostGroup
from hopsml.collective.peers import Peer
from hopsml.collective.ring import SendWorker, finisher, ring_allreduce
from hopsml.collective.transport import PeerLost

SEGMENT_BYTES = 512 << 10  # pipeline segment of the ring and the chain broadcast

OnFailure = Callable[[PeerLost], None]


class AllreducePath(Protocol):
    """One way to all-reduce a 1-D contiguous array in place among all ranks (every rank calls it together)."""

    name: str

    def allreduce(self, flat: np.ndarray, op: str) -> None:
        """All-reduce `flat` in place with op ('sum', 'mean', 'min', 'max'); raises PeerLost."""

    def shutdown(self) -> None:
        """Wake this rank's waits on the path: the communicator aborts."""

    def close(self) -> None:
        """Release what the path holds (not the peers: the communicator closes those)."""


class Ring:
    """The pipelined ring prev -> rank -> next over the peer connections."""

    name = "ring"

    def __init__(self, rank: int, size: int, prev: Peer, next_: Peer, worker: SendWorker,
                 on_failure: OnFailure) -> None:
        self._rank, self._size = rank, size
        self._prev, self._next = prev, next_
        self._worker, self._on_failure = worker, on_failure

    def allreduce(self, flat: np.ndarray, op: str) -> None:
        ring_allreduce(flat, op, self._rank, self._size, self._prev, self._next, self._worker, self._on_failure,
                       SEGMENT_BYTES)

    def shutdown(self) -> None:
        pass

    def close(self) -> None:
        pass


class Single:
    """A world of one rank: nothing to move (reported as the ring, as a one-rank communicator always was)."""

    name = "ring"

    def allreduce(self, flat: np.ndarray, op: str) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def close(self) -> None:
        pass


class HostSegment:
    """All ranks on one host, meeting in its shared segment."""

    name = "host"

    def __init__(self, group: HostGroup) -> None:
        self._group = group

    def allreduce(self, flat: np.ndarray, op: str) -> None:
        self._group.allreduce(flat, op)

    def shutdown(self) -> None:
        self._group.shutdown()

    def close(self) -> None:
        self._group.close()


class Hierarchical:
    """Reduce within this host to its leader, ring across the hosts' leaders, broadcast within the host."""

    name = "hierarchical"

    def __init__(self, rank: int, size: int, group: HostGroup | None, leaders: list[int],
                 peers: Mapping[int, Peer], worker: SendWorker, on_failure: OnFailure) -> None:
        self._size = size
        self._group = group  # None: this rank is alone on its host (it is its host's leader)
        self._leader_ring: Ring | None = None
        if rank in leaders and len(leaders) > 1:
            i, n = leaders.index(rank), len(leaders)
            self._leader_ring = Ring(i, n, peers[leaders[(i - 1) % n]], peers[leaders[(i + 1) % n]], worker,
                                     on_failure)

    def allreduce(self, flat: np.ndarray, op: str) -> None:
        combine = "sum" if op == "mean" else op
        group = self._group
        if group is not None:
            group.allreduce(flat, combine, everyone=False)
        if self._leader_ring is not None:
            self._leader_ring.allreduce(flat, combine)
        if group is not None:
            group.broadcast_from_leader(flat)
        finish = finisher(op, flat.dtype, self._size)
        if finish is not None:
            finish(flat)

    def shutdown(self) -> None:
        if self._group is not None:
            self._group.shutdown()

    def close(self) -> None:
        if self._group is not None:
            self._group.close()


def choose(rank: int, size: int, peers: Mapping[int, Peer], group: HostGroup | None, hosts: list[str],
           grouped: bool, worker: SendWorker, on_failure: OnFailure) -> AllreducePath:
    """The path of this communicator, the same on every rank: `hosts` is every rank's host identity ('' for a
    rank without shared memory: a host of its own), `grouped` whether every host with several ranks has its
    segment (`host.attach`), `group` this rank's."""
    if size == 1:
        return Single()
    keys = [h or f"rank {r}" for r, h in enumerate(hosts)]
    if grouped and 1 < len(set(keys)) < size:
        leaders = sorted({keys.index(k) for k in keys})
        return Hierarchical(rank, size, group, leaders, peers, worker, on_failure)
    if group is not None and group.size == size:
        return HostSegment(group)
    if group is not None:  # every rank of this host decided the same: none of them uses the segment
        group.close()
    return Ring(rank, size, peers[(rank - 1) % size], peers[(rank + 1) % size], worker, on_failure)
