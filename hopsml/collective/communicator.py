"""The Communicator: one rank's authenticated connections to all other ranks, and the collectives on them.

Every collective starts with a header exchange (see `protocol`): each rank sends every peer what it is
about to do, in a pairwise schedule (at step k, send to rank+k and receive from rank-k) so that no two
ranks wait on each other. Messages of at most SMALL_BYTES travel inside that same exchange and are
combined in rank order on every rank (one round trip: the latency path). Larger ones go around the
pipelined ring after the header check (the bandwidth path). Both give every rank identical bits.

Ranks on the same host move their data through shared memory (`shm`: a ring per pair and direction); when
all ranks share one host, large all-reduces meet in one segment (`host`); across hosts they are
hierarchical: within each host through its segment, over TCP between one leader per host.

A peer that dies, disconnects or stops making progress for `timeout_s` becomes a CollectiveError on this
rank; the rank then tells every peer why on the control connections and shuts its data connections down,
so that the other ranks fail at once with the same root cause instead of waiting for their timeout.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from socket import socket
from typing import Any, TypeVar

import numpy as np

from hopsml.collective import gpu, host, shm
from hopsml.collective.protocol import FIXED_SIZE, OPS, Header, check_headers, describe_array
from hopsml.collective.ring import (Layout, Scratch, SendWorker, chain_broadcast, finisher, reduce_rank_ordered,
                                   ring_allreduce)
from hopsml.collective.timeout import TIMEOUT_ENV, resolve_timeout
from hopsml.collective.transport import Peer, PeerLost, connect_peers
from hopsml.errors import CollectiveError, SettingsError

logger = logging.getLogger(__name__)

SMALL_BYTES = 64 << 10  # up to this size a collective is one direct exchange instead of the ring
SEGMENT_BYTES = 512 << 10  # pipeline segment of the ring and the chain broadcast
MERGED_INLINE_BYTES = SMALL_BYTES  # an inline payload up to this size travels in its header's message
_ALIGN = 64  # byte alignment of each dtype's region in a fused buffer
_REDUCIBLE_KINDS = "biufc"

ArrayT = TypeVar("ArrayT")


def _dtype_text(dtype: np.dtype) -> str:
    return dtype.name if dtype.isnative else dtype.str


@functools.lru_cache(maxsize=1024)
def _describe(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    """'float32[3, 4]': what every rank's header says about its array (cached: it runs for every call)."""
    return describe_array("", _dtype_text(dtype), shape)


def _local_problem(array: Any, op: str | None, writable: bool = True) -> str:
    """Why this rank cannot take part, or '' (sent to all ranks so that every rank raises together)."""
    if op is not None and op not in OPS:
        return f"op {op!r} is not one of {', '.join(map(repr, OPS))}"
    dtype = array.dtype
    if dtype.kind not in _REDUCIBLE_KINDS:
        return f"dtype {dtype} cannot be reduced; pass a numeric array"
    if op == "mean" and dtype.kind == "b":
        return "op 'mean' needs a numeric dtype, not bool"
    if writable and isinstance(array, np.ndarray) and not array.flags.writeable:
        return "the array is read-only; the collective writes its result into it"
    return ""


def _header_message_rest(fixed: memoryview) -> int:
    """How many bytes of its message follow a header's fixed part (see Header.message_rest)."""
    return Header.message_rest(fixed, MERGED_INLINE_BYTES)


def _fused_description(arrays: Sequence[np.ndarray], layout: Layout) -> str:
    text = f"{len(arrays)} arrays: " + ", ".join(_describe(a.dtype, a.shape) for a in arrays)
    if len(text) <= 400:
        return text
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    totals = ", ".join(f"{count} x {_dtype_text(dtype)}" for dtype, _, count in layout)
    return f"{len(arrays)} arrays ({totals}; shapes signature {digest})"


class Communicator:
    """One rank's view of the world: `rank`, `size`, and the collectives.

    Build it with `Communicator.connect`; use it from one thread at a time, and close it (or use it as a
    context manager) when done. After a peer failure it refuses further work; after a mismatch (the
    ranks asked for different things) it stays usable.
    """

    def __init__(self, rank: int, size: int, peers: dict[int, Peer | shm.ShmPeer], timeout_s: float,
                 host_group: host.HostGroup | None = None, leaders: list[int] | None = None) -> None:
        self._rank = rank
        self._host = host_group
        self._leaders = leaders
        self._size = size
        self._peers = peers
        self.timeout_s = timeout_s
        self._seq = 0
        self._label = ""
        self._failure: str | None = None
        self._blame: tuple[int | None, str | None] = (None, None)  # (peer, kind) of the first failure
        self._fail_lock = threading.Lock()
        self._closed = False
        self._worker = SendWorker(f"hopsml-collective-send-{rank}") if size > 1 else None
        self._scratch = Scratch()
        self._prev = peers.get((rank - 1) % size)
        self._next = peers.get((rank + 1) % size)
        self._nccl: gpu.NcclComm | None = None
        self._gpu_path: str | None = None  # 'nccl' or 'host' once the ranks agreed, at the first device collective
        self._gpu_error: str | None = None

    @classmethod
    def connect(cls, rank: int, size: int, addresses: Sequence[str], listener: socket | None, secret: bytes,
                timeout_s: float | None = None) -> Communicator:
        """Connect this rank to every other one (authenticated) and return the communicator.

        `addresses[i]` is what rank i's `collective.listen(host)` returned; `listener` is this rank's own
        listening socket from that call (the communicator closes it once all peers are connected).
        `timeout_s` bounds every wait; default: $HOPSML_COLLECTIVE_TIMEOUT_S, else 300 s.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SettingsError(f"size is {size!r}; the number of ranks must be an integer >= 1")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
            raise SettingsError(f"rank is {rank!r}; it must be an integer in [0, {size})")
        timeout = resolve_timeout(timeout_s)
        if size == 1:
            if listener is not None:
                listener.close()
            return cls(0, 1, {}, timeout)
        if len(addresses) != size:
            raise SettingsError(f"got {len(addresses)} addresses for {size} ranks; pass every rank's address, "
                                "in rank order")
        if not isinstance(secret, bytes) or not secret:
            raise SettingsError("secret must be the experiment's non-empty secret bytes (hopsml.auth.new_secret())")
        peers = connect_peers(rank, size, list(addresses), listener, secret, timeout)
        try:
            peers, hosts = shm.attach_same_host(rank, size, peers)
            group, grouped = host.attach(rank, size, peers, hosts, timeout, shm.send_text, shm.recv_text)
            keys = [h or f"rank {r}" for r, h in enumerate(hosts)]  # a rank without shared memory: a host of its own
            leaders = None
            if grouped and 1 < len(set(keys)) < size:
                # several hosts, at least one of them with several ranks: reduce within each host, ring
                # across one leader per host, broadcast within each host
                leaders = sorted({keys.index(k) for k in keys})
            return cls(rank, size, peers, timeout, group, leaders)
        except PeerLost as lost:
            for peer in peers.values():
                peer.close()
            raise CollectiveError(f"rank {rank} lost its connection to rank {lost.peer} ({lost.reason}) while "
                                  "setting up shared memory with the ranks on its host; look at that rank's log "
                                  "for the cause") from None
        except BaseException:
            for peer in peers.values():
                peer.close()
            raise

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def shared_memory_peers(self) -> list[int]:
        """The ranks this rank exchanges data with through shared memory (same host); the others use TCP."""
        return sorted(r for r, peer in self._peers.items() if isinstance(peer, shm.ShmPeer))

    @property
    def allreduce_path(self) -> str:
        """How large all-reduces go: 'host' (all ranks on one host meet in one shared segment), 'hierarchical'
        (within each host through its segment, across hosts over a ring of one leader per host) or 'ring'."""
        if self._leaders is not None:
            return "hierarchical"
        return "host" if self._host is not None and self._host.size == self._size else "ring"

    def __repr__(self) -> str:
        state = "failed" if self._failure else "closed" if self._closed else "open"
        return f"Communicator(rank={self._rank}, size={self._size}, {state})"

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; the peers see end-of-stream. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._nccl is not None:
            try:
                self._nccl.close()
            except Exception as exc:  # noqa: BLE001 - closing must go on to the sockets
                logger.warning("destroying the NCCL communicator failed: %s", exc)
        if self._worker is not None:
            self._worker.close()
        if self._host is not None:
            self._host.close()
        for peer in self._peers.values():
            peer.close()

    # failure handling

    def _fail(self, lost: PeerLost, label: str) -> str:
        """Record the first failure, tell the peers, shut the data connections down; returns the first cause."""
        with self._fail_lock:
            if self._failure is not None:
                return self._failure
            me, peer = self._rank, lost.peer
            notice = None if lost.timed_out or lost.tampered else _read_cause(self._peers[peer].read_notice())
            if lost.tampered:
                blame = (peer, CollectiveError.TAMPERED)
                cause = message = (f"rank {me} refused a message during {label}: {lost.reason}. Something between "
                                   f"rank {me} and rank {peer} writes to their connection; the run stops, since "
                                   "nothing it receives can be trusted (check the network path between the hosts)")
            elif notice:
                # pass the first cause on unchanged, so that every rank names the rank that really failed
                cause, blame = notice[0], notice[1]
                message = f"{cause} (rank {me} learned this from rank {peer}, which aborted)"
            elif lost.timed_out:
                blame = (peer, CollectiveError.STUCK)
                cause = message = (f"rank {me} timed out during {label}: rank {peer} made no progress for "
                                   f"{self.timeout_s:g} s; rank {peer} may be hung, stuck before the same call, "
                                   f"or on an unreachable host (raise {TIMEOUT_ENV} if it is just slow)")
            else:
                blame = (peer, CollectiveError.DIED)
                cause = message = (f"rank {me} lost its connection to rank {peer} ({lost.reason}) during {label}; "
                                   f"rank {peer} probably died: look at its log for the cause")
            self._abort(message, cause, blame)
            return message

    def _error(self, message: str) -> CollectiveError:
        """This communicator's failure as an error that carries the blamed peer and the kind of failure."""
        peer, kind = self._blame
        return CollectiveError(message, peer=peer, kind=kind)

    def _abort(self, message: str, cause: str | None = None,
               blame: tuple[int | None, str | None] = (None, None)) -> None:
        """Remember the failure, send its cause (and whom it blames) to every peer on the control
        connections, stop the data."""
        if self._failure is None:
            self._failure, self._blame = message, blame
        logger.error("%s", message)
        notice = json.dumps({"cause": cause or message, "peer": blame[0], "kind": blame[1]})
        for peer in self._peers.values():
            peer.send_notice(notice)
        if self._host is not None:  # after the notices: a rank woken by it reads this rank's notice
            self._host.shutdown()
        for peer in self._peers.values():
            peer.shutdown()

    def _on_failure(self, lost: PeerLost) -> None:
        self._fail(lost, self._label)

    @contextmanager
    def _operation(self, kind: str) -> Iterator[int]:
        if self._failure is not None:
            raise self._error(f"this communicator stopped after an earlier failure ({self._failure}); "
                              "the experiment has to be restarted")
        if self._closed:
            raise CollectiveError("the communicator is closed; collectives only work while the run is active")
        self._seq += 1
        self._label = f"{kind} #{self._seq}"
        try:
            yield self._seq
        except PeerLost as lost:
            raise self._error(self._fail(lost, self._label)) from None
        except CollectiveError:
            raise  # every rank raised it after a complete exchange: the communicator is still in step
        except BaseException:
            with self._fail_lock:
                if self._failure is None:
                    self._abort(f"rank {self._rank} was interrupted during {self._label}")
            raise

    # the header exchange

    def _exchange(self, header: Header, payload: memoryview | None = None,
                  sink: Callable[[int, Header], memoryview | None] | None = None) -> list[Header]:
        """Send our header (and inline payload) to every peer and read theirs; `sink` says where a peer's
        inline payload goes (None: read and drop it)."""
        n, me = self._size, self._rank
        packed = header.pack()
        if 0 < header.inline <= MERGED_INLINE_BYTES:  # one message: one tag, one recv on the other side
            message = [b"".join((packed, payload))]
        else:
            message = [packed] + ([payload] if header.inline else [])
        job = None
        if sum(len(part) for part in message) <= SMALL_BYTES + 4096:
            for k in range(1, n):  # fits in the socket buffers: no need to receive concurrently
                self._peers[(me + k) % n].send(message)
        else:
            def send_all() -> None:
                try:
                    for k in range(1, n):
                        self._peers[(me + k) % n].send(message)
                except PeerLost as lost:
                    self._on_failure(lost)
                    raise

            job = self._worker.submit(send_all)
        headers: list[Header] = [header] * n
        try:
            for k in range(1, n):
                rank = (me - k) % n
                peer = self._peers[rank]
                # the header, its description and a small payload are one message (a larger payload is
                # another): authenticated before any field of it is used
                got = peer.recv_message(FIXED_SIZE, _header_message_rest)
                if got.startswith(packed):  # the common case: the peer asks for exactly what this rank does
                    theirs, desc_end = header, len(packed)
                else:
                    parsed = Header.unpack_fixed(got[:FIXED_SIZE])
                    if parsed is None:
                        raise PeerLost(rank, "it sent a message that is not a collective header: the ranks are out "
                                             "of step")
                    theirs, desc_end = parsed[0], FIXED_SIZE + parsed[1]
                    if desc_end > FIXED_SIZE:
                        theirs = replace(theirs, desc=got[FIXED_SIZE:desc_end].decode("utf-8", "replace"))
                if theirs.inline:
                    target = sink(rank, theirs) if sink is not None else None
                    if target is None or len(target) != theirs.inline:
                        target = memoryview(bytearray(theirs.inline))
                    if theirs.inline <= MERGED_INLINE_BYTES:
                        target[:] = memoryview(got)[desc_end:]
                    else:
                        peer.recv_into(target)
                headers[rank] = theirs
        except PeerLost as lost:
            self._on_failure(lost)
            if job is not None:
                job.done.wait()
            raise
        if job is not None:
            job.done.wait()
            if job.error is not None:
                raise job.error
        return headers

    def _matches(self, mine: Header, theirs: Header) -> bool:
        return (theirs.kind, theirs.seq, theirs.op, theirs.root, theirs.desc, theirs.nbytes, theirs.error) == \
            (mine.kind, mine.seq, mine.op, mine.root, mine.desc, mine.nbytes, mine.error)

    # the collectives

    def barrier(self) -> None:
        """Return once every rank has called barrier()."""
        if self._size == 1:
            return
        with self._operation("barrier") as seq:
            check_headers(self._exchange(Header("barrier", seq, "")))

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's picklable object, in rank order (pickles come only from authenticated peers)."""
        problem = ""
        try:
            payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - any pickling failure is reported to all ranks
            payload, problem = b"", f"the object cannot be pickled: {exc}"
        if self._size == 1:
            if problem:
                raise CollectiveError(f"allgather: {problem}")
            return [obj]
        with self._operation("allgather") as seq:
            header = Header("allgather", seq, problem or "object", nbytes=len(payload),
                            inline=len(payload), error=bool(problem))
            received: dict[int, memoryview] = {}

            def sink(rank: int, theirs: Header) -> memoryview:
                received[rank] = memoryview(bytearray(theirs.inline))
                return received[rank]

            check_headers(self._exchange(header, memoryview(payload), sink), same_nbytes=False)
            return [obj if rank == self._rank else pickle.loads(received[rank]) for rank in range(self._size)]

    def allreduce(self, array: ArrayT, op: str = "sum") -> ArrayT:
        """Combine the array over all ranks with op ('sum', 'mean', 'min', 'max'); in place for numpy and
        cupy arrays, which are returned. Anything else is converted to a new numpy array, which is returned.
        'mean' of integers is rounded down (floor division)."""
        if gpu.is_device_array(array):
            return self._device_allreduce(array, op)
        arr = array if isinstance(array, np.ndarray) else np.array(array)
        problem = _local_problem(arr, op)
        if self._size == 1:
            if problem:
                raise CollectiveError(f"allreduce: {problem}")
            return arr
        contiguous = arr.flags.c_contiguous
        flat = arr.reshape(-1) if contiguous else np.ascontiguousarray(arr).reshape(-1)
        desc = _describe(arr.dtype, arr.shape)
        self._allreduce_flat("allreduce", flat.view(np.uint8) if not problem else np.empty(0, np.uint8),
                             [(flat.dtype, 0, flat.size)], op, desc, problem)
        if not contiguous:
            arr[...] = flat.reshape(arr.shape)
        return arr

    def allreduce_many(self, arrays: Sequence[ArrayT], op: str = "sum") -> list[ArrayT]:
        """All-reduce many arrays in one fused operation: one buffer per dtype, one pass, in place.

        Fusion trades a copy into and out of the buffer for a single header exchange and one ring pass
        instead of one per array, which is what makes many small gradients cheap.
        """
        arrays = list(arrays)
        if any(gpu.is_device_array(a) for a in arrays):
            return self._device_allreduce_many(arrays, op)
        arrays = [a if isinstance(a, np.ndarray) else np.array(a) for a in arrays]
        problem = next((f"array {i}: {p}" for i, a in enumerate(arrays) if (p := _local_problem(a, op))), "")
        if op not in OPS:
            problem = _local_problem(np.empty(0), op)
        if self._size == 1:
            if problem:
                raise CollectiveError(f"allreduce_many: {problem}")
            return arrays
        layout: Layout = []
        places: list[tuple[int, int]] = []  # per array: (group index, element offset inside the group)
        groups: dict[np.dtype, int] = {}
        counts: list[int] = []
        for a in arrays:
            g = groups.setdefault(a.dtype, len(groups))
            if g == len(counts):
                counts.append(0)
            places.append((g, counts[g]))
            counts[g] += a.size
        offset = 0
        for dtype, g in groups.items():
            layout.append((dtype, offset, counts[g]))
            offset += -(-counts[g] * dtype.itemsize // _ALIGN) * _ALIGN
        desc = _fused_description(arrays, layout)
        raw = self._scratch.get("fused", offset)[:0 if problem else offset]  # kept across calls

        def region(i: int) -> np.ndarray:
            g, start = places[i]
            dtype, byte_offset, _ = layout[g]
            begin = byte_offset + start * dtype.itemsize
            return raw[begin:begin + arrays[i].size * dtype.itemsize].view(dtype)

        if not problem:
            for i, a in enumerate(arrays):
                region(i)[...] = a.reshape(-1)
        self._allreduce_flat("allreduce_many", raw, layout, op, desc, problem)
        for i, a in enumerate(arrays):
            a[...] = region(i).reshape(a.shape)
        return arrays

    def _allreduce_flat(self, kind: str, raw: np.ndarray, layout: Layout, op: str, desc: str,
                        problem: str) -> None:
        """All-reduce the regions `layout` of the contiguous byte array `raw` in place."""
        if self._size == 1:
            if problem:
                raise CollectiveError(f"{kind}: {problem}")
            return
        with self._operation(kind) as seq:
            nbytes = raw.size
            small = nbytes <= SMALL_BYTES
            header = Header(kind, seq, problem or desc, op if op in OPS else "", -1, nbytes,
                            inline=nbytes if small else 0, error=bool(problem))
            if not small:
                check_headers(self._exchange(header))
                for dtype, offset, count in layout:
                    region = raw[offset:offset + count * dtype.itemsize].view(dtype)
                    if self._leaders is not None:
                        self._hierarchical_allreduce(region, op)
                        continue
                    if self._host is not None and self._host.size == self._size:
                        self._host.allreduce(region, op)
                        continue
                    ring_allreduce(region, op, self._rank, self._size, self._prev, self._next, self._worker,
                                   self._on_failure, SEGMENT_BYTES, self._scratch)
                return
            stride = -(-nbytes // _ALIGN) * _ALIGN
            rows = self._scratch.get("rows", self._size * stride)[:self._size * stride].reshape(self._size, stride)

            def sink(rank: int, theirs: Header) -> memoryview | None:
                return memoryview(rows[rank, :nbytes]) if theirs.inline == nbytes else None

            check_headers(self._exchange(header, memoryview(raw), sink))
            reduce_rank_ordered(raw, layout, rows, op, self._rank, self._size)

    def _hierarchical_allreduce(self, flat: np.ndarray, op: str) -> None:
        """Reduce within this host to its leader, ring across the hosts' leaders, broadcast within the host."""
        combine = "sum" if op == "mean" else op
        group = self._host
        if group is not None:
            group.allreduce(flat, combine, everyone=False)
        leaders = self._leaders
        if self._rank in leaders and len(leaders) > 1:
            i, n = leaders.index(self._rank), len(leaders)
            ring_allreduce(flat, combine, i, n, self._peers[leaders[(i - 1) % n]], self._peers[leaders[(i + 1) % n]],
                           self._worker, self._on_failure, SEGMENT_BYTES, self._scratch)
        if group is not None:
            group.broadcast_from_leader(flat)
        finish = finisher(op, flat.dtype, self._size)
        if finish is not None:
            finish(flat)

    def broadcast(self, array: ArrayT, root: int = 0) -> ArrayT:
        """Overwrite the array on every rank with root's; in place, returned. Every rank passes an array of
        the same dtype and shape."""
        if gpu.is_device_array(array):
            return self._device_broadcast(array, root)
        problem = ""
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < self._size:
            problem, root = f"root {root!r} is not a rank in [0, {self._size})", -1
        if not isinstance(array, np.ndarray):
            if self._rank != root:
                problem = problem or (f"broadcast needs a numpy array to receive into, got {type(array).__name__}")
            array = np.array(array)
        arr = array
        if not arr.flags.writeable and self._rank != root:
            problem = problem or "the array is read-only; broadcast writes root's data into it"
        if self._size == 1:
            if problem:
                raise CollectiveError(f"broadcast: {problem}")
            return arr
        contiguous = arr.flags.c_contiguous
        flat = arr.reshape(-1) if contiguous else np.ascontiguousarray(arr).reshape(-1)
        raw = flat.view(np.uint8) if flat.dtype.kind != "O" else np.empty(0, np.uint8)
        if flat.dtype.kind == "O":
            problem = problem or "broadcast of object arrays is not supported; use allgather for Python objects"
        desc = _describe(arr.dtype, arr.shape)
        with self._operation("broadcast") as seq:
            nbytes = raw.size
            small = nbytes <= SMALL_BYTES
            header = Header("broadcast", seq, problem or desc, "", root, nbytes,
                            inline=nbytes if small and self._rank == root and not problem else 0,
                            error=bool(problem))
            if small:
                expected = replace(header, inline=nbytes, error=False)

                def sink(rank: int, theirs: Header) -> memoryview | None:
                    # straight into the array, but only data that is certain to pass the check
                    return memoryview(raw) if rank == root and self._matches(expected, theirs) else None

                check_headers(self._exchange(header, memoryview(raw), sink))
            else:
                check_headers(self._exchange(header))
                chain_broadcast(flat.view(np.uint8), root, self._rank, self._size, self._prev, self._next,
                                self._worker, self._on_failure, SEGMENT_BYTES)
        if not contiguous and self._rank != root:
            arr[...] = flat.reshape(arr.shape)
        return arr

    # the GPU path

    def _lost_peer(self) -> int | None:
        """A peer that aborted or closed (it wrote to or closed its control connection), else None."""
        return next((rank for rank, peer in self._peers.items() if peer.signalled()), None)

    def _run_nccl(self, call: Callable[[], Any]) -> Any:
        """Run an NCCL step inside an operation; turn its failure into this communicator's failure."""
        try:
            return call()
        except gpu.NcclFailure as failure:
            if failure.peer is not None:
                raise PeerLost(failure.peer, failure.reason) from None  # _operation names the root cause
            with self._fail_lock:
                if self._failure is None:
                    self._abort(f"rank {self._rank}: {failure.reason} (during {self._label})")
            raise self._error(self._failure) from None

    def _nccl_comm(self) -> gpu.NcclComm | None:
        """The NCCL communicator, agreed on and created collectively on first use; None for the host path."""
        if self._gpu_error is not None:
            raise CollectiveError(self._gpu_error)
        if self._gpu_path is None:
            nccl = gpu.nccl_module()
            offers = self.allgather(gpu.setup_offer(self._rank, nccl, gpu.device_identity(), gpu.collective_mode()))
            try:
                reason = gpu.choose_path(offers)
            except CollectiveError as exc:  # the same on every rank: the communicator stays in step
                self._gpu_error = str(exc)
                raise
            if reason:
                self._gpu_path = "host"
                logger.warning("GPU collectives go through host memory and the TCP ring (slower than NCCL): %s",
                               reason)
            else:
                with self._operation("NCCL set-up"):
                    self._nccl = self._run_nccl(lambda: gpu.NcclComm(nccl, self._size, self._rank, offers[0]["uid"],
                                                                     self.timeout_s, self._lost_peer))
                self._gpu_path = "nccl"
        return self._nccl

    def _device_collective(self, kind: str, array: Any, op: str, root: int,
                           run: Callable[[gpu.NcclComm], None]) -> bool:
        """Header check, then `run` on the NCCL communicator, in one operation; False: use the host path."""
        if self._size == 1 or not gpu.nccl_supports(array.dtype):
            return False
        comm = self._nccl_comm()
        if comm is None:
            return False
        problem = _local_problem(array, op if kind == "allreduce" else None, writable=False)
        desc = describe_array("cuda/nccl", str(array.dtype), array.shape)
        with self._operation(kind) as seq:
            nbytes = array.size * array.dtype.itemsize
            check_headers(self._exchange(Header(kind, seq, problem or desc, op if op in OPS else "", root,
                                                nbytes, error=bool(problem))))
            self._run_nccl(lambda: run(comm))
        return True

    def _device_allreduce(self, array: ArrayT, op: str) -> ArrayT:
        if self._device_collective("allreduce", array, op, -1, lambda comm: comm.allreduce(array, op)):
            return array
        if self._size > 1 or op not in OPS:
            cupy = gpu.cupy_module()
            host = self.allreduce(cupy.asnumpy(array), op)
            array[...] = cupy.asarray(host)
        return array

    def _device_allreduce_many(self, arrays: list[Any], op: str) -> list[Any]:
        cupy = gpu.cupy_module()
        arrays = [a if gpu.is_device_array(a) else cupy.asarray(a) for a in arrays]
        by_dtype: dict[Any, list[int]] = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault(a.dtype, []).append(i)
        for indices in by_dtype.values():
            packed = cupy.concatenate([arrays[i].reshape(-1) for i in indices])
            self._device_allreduce(packed, op)
            start = 0
            for i in indices:
                n = arrays[i].size
                arrays[i][...] = packed[start:start + n].reshape(arrays[i].shape)
                start += n
        return arrays

    def _device_broadcast(self, array: ArrayT, root: int) -> ArrayT:
        valid_root = isinstance(root, int) and not isinstance(root, bool) and 0 <= root < self._size
        if valid_root and self._device_collective("broadcast", array, "", root,
                                                  lambda comm: comm.broadcast(array, root)):
            return array
        if self._size > 1:
            cupy = gpu.cupy_module()
            host = self.broadcast(cupy.asnumpy(array), root)
            array[...] = cupy.asarray(host)
        return array


def _read_cause(notice: str | None) -> tuple[str, tuple[int | None, str | None]] | None:
    """An abort notice's cause text and the (peer, kind) it blames; None when the peer sent none."""
    if notice is None:
        return None
    try:
        data = json.loads(notice)
        return str(data["cause"]), (data.get("peer"), data.get("kind"))
    except (ValueError, KeyError, TypeError):
        return notice, (None, None)
