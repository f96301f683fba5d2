"""The Communicator: one rank's authenticated connections to all other ranks, and the collectives on them.

Every collective starts with a header exchange (see `exchange`): each rank sends every peer what it is about
to do, and every rank runs the same check on all headers (`protocol.check_headers`). Messages of at most
SMALL_BYTES travel inside that same exchange and are combined in rank order on every rank (one round trip:
the latency path). Larger all-reduces go the communicator's path (`paths`), chosen once at connect from
where the ranks are: one shared segment when all ranks share a host, hierarchical across hosts, else the
pipelined ring. Larger broadcasts go along the chain broadcast. All give every rank identical bits. cupy
arrays go the GPU path (`device`: NCCL, or through host memory).

What the communicator follows (timeout, shared memory, host identity, GPU mode) is its `CollectiveOptions`,
given at connect; it reads nothing from the environment itself.

A peer that dies, disconnects or stops making progress for `timeout_s` becomes a CollectiveError on this
rank; the rank then tells every peer why on the control connections and shuts its data connections down,
so that the other ranks fail at once with the same root cause instead of waiting for their timeout
(`failure`: the protocol, which the communicator's methods only call).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import pickle
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from socket import socket
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from hopsml.collective import gpu, host, native, shm
from hopsml.collective.device import DevicePath, local_problem
from hopsml.collective.exchange import SMALL_BYTES, Sink, exchange, matches
from hopsml.collective.failure import Failure
from hopsml.collective.handshake import connect_peers
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.paths import SEGMENT_BYTES, AllreducePath, choose
from hopsml.collective.peers import Peer
from hopsml.collective.pending import AsyncQueue, Handle
from hopsml.collective.protocol import FIXED_SIZE, OPS, Header, check_headers, describe_array
from hopsml.collective.ring import Layout, Scratch, SendWorker, chain_broadcast, reduce_rank_ordered
from hopsml.collective.transport import PeerLost
from hopsml.errors import CollectiveError, SettingsError

if TYPE_CHECKING:
    from hopsml.timeline.recorder import Recorder

logger = logging.getLogger(__name__)

__all__ = ["SEGMENT_BYTES", "SMALL_BYTES", "Communicator"]

_ALIGN = 64  # byte alignment of each dtype's region in a fused buffer

ArrayT = TypeVar("ArrayT")


def _dtype_text(dtype: np.dtype) -> str:
    return dtype.name if dtype.isnative else dtype.str


@functools.lru_cache(maxsize=1024)
def _describe(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    """'float32[3, 4]': what every rank's header says about its array (cached: it runs for every call)."""
    return describe_array("", _dtype_text(dtype), shape)


def _fused_description(arrays: Sequence[np.ndarray], layout: Layout) -> str:
    text = f"{len(arrays)} arrays: " + ", ".join(_describe(a.dtype, a.shape) for a in arrays)
    if len(text) <= 400:
        return text
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    totals = ", ".join(f"{count} x {_dtype_text(dtype)}" for dtype, _, count in layout)
    return f"{len(arrays)} arrays ({totals}; shapes signature {digest})"


def _options(options: CollectiveOptions | None, timeout_s: float | None) -> CollectiveOptions:
    """The options a connect follows: the ones given (with `timeout_s` over their timeout), else this
    process's settings."""
    if options is None:
        return CollectiveOptions.resolve(timeout_s)
    if not isinstance(options, CollectiveOptions):
        raise SettingsError(f"options is a {type(options).__name__}; pass a hopsml.collective.options."
                            "CollectiveOptions (CollectiveOptions.from_settings(settings)) or None")
    return options if timeout_s is None else dataclasses.replace(options, timeout_s=timeout_s)


class Communicator:
    """One rank's view of the world: `rank`, `size`, and the collectives.

    Build it with `Communicator.connect`; use it from one thread at a time, and close it (or use it as a
    context manager) when done. After a peer failure it refuses further work; after a mismatch (the
    ranks asked for different things) it stays usable.
    """

    def __init__(self, rank: int, size: int, peers: dict[int, Peer], options: CollectiveOptions,
                 group: host.HostGroup | None = None, hosts: list[str] | None = None, grouped: bool = False) -> None:
        self._rank = rank
        self._size = size
        self._peers = peers
        self.options = options
        self.timeout_s = options.timeout_s
        self._seq = 0
        self._label = ""
        self._failed = Failure(rank, peers, options.timeout_s, lambda: self._path.shutdown())
        self._closed = False
        self._worker = SendWorker(f"hopsml-collective-send-{rank}")
        self._scratch = Scratch()
        self._path: AllreducePath = choose(rank, size, peers, group, hosts or [""] * size, grouped, self._worker,
                                           self._on_failure)
        self._device = DevicePath(self, options.gpu_mode)
        self.timeline: Recorder | None = None  # while the rank records its timeline
        self._op_bytes = 0
        self._peers_in = 0  # when the current op's last peer header came in (only while recording)
        # the compiled same-host exchange (all ranks on this host, every one with the module): `native`
        self._small: native.SmallArea | None = group.small if group is not None and group.size == size else None
        # (dtype, shape, op) -> packed header (seq 0), dtype code, op code: a small all-reduce seen before
        self._fast: dict[tuple[Any, ...], tuple[bytes, int, int]] = {}
        self._async: AsyncQueue | None = None  # the background thread of allreduce_async, started on first use
        self._submitted = 0

    def attach_timeline(self, recorder: Recorder | None) -> None:
        """Record every collective op into `recorder` (a hopsml.timeline Recorder); None stops recording."""
        if recorder is not None:
            tcp = len(self.shared_memory_peers) < len(self._peers)
            recorder.paths.update({"small_bytes": SMALL_BYTES, "small": "tcp" if tcp else "shm",
                                   "large": {"host": "shm", "ring": "tcp ring" if tcp else "shm ring"}.get(
                                       self._path.name, self._path.name),
                                   "broadcast": "tcp chain" if tcp else "shm chain"})
        self.timeline = recorder

    @classmethod
    def connect(cls, rank: int, size: int, addresses: Sequence[str], listener: socket | None, secret: bytes,
                timeout_s: float | None = None, *, options: CollectiveOptions | None = None) -> Communicator:
        """Connect this rank to every other one (authenticated) and return the communicator.

        `addresses[i]` is what rank i's `collective.listen(host)` returned; `listener` is this rank's own
        listening socket from that call (the communicator closes it once all peers are connected).
        `options` are what the communicator follows (the launcher passes the run's); None: this process's
        settings (`CollectiveOptions.resolve`). `timeout_s`, if given, bounds every wait instead of the
        options' timeout.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SettingsError(f"size is {size!r}; the number of ranks must be an integer >= 1")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
            raise SettingsError(f"rank is {rank!r}; it must be an integer in [0, {size})")
        chosen = _options(options, timeout_s)
        if size == 1:
            if listener is not None:
                listener.close()
            return cls(0, 1, {}, chosen)
        if len(addresses) != size:
            raise SettingsError(f"got {len(addresses)} addresses for {size} ranks; pass every rank's address, "
                                "in rank order")
        if not isinstance(secret, bytes) or not secret:
            raise SettingsError("secret must be the experiment's non-empty secret bytes "
                                "(hopsml.cluster.auth.new_secret())")
        tcp = connect_peers(rank, size, list(addresses), listener, secret, chosen.timeout_s)
        peers: dict[int, Peer] = dict(tcp)
        try:
            peers, hosts = shm.attach_same_host(rank, size, tcp, chosen)
            compiled = chosen.native and any(isinstance(p, shm.ShmPeer) for p in peers.values()) and \
                native.available()
            group, grouped = host.attach(rank, size, peers, hosts, chosen.timeout_s, shm.send_text, shm.recv_text,
                                         compiled)
            return cls(rank, size, peers, chosen, group, hosts, grouped)
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
    def small_path(self) -> str:
        """How headers and small all-reduces go: 'compiled' (the compiled same-host exchange, `native`),
        'shm' (messages over the shared-memory rings, in Python) or 'tcp'."""
        if self._small is not None:
            return "compiled"
        return "shm" if self._peers and len(self.shared_memory_peers) == len(self._peers) else "tcp"

    def native_profile(self, enable: bool | None = None) -> dict[str, int] | None:
        """The compiled exchange's time split, for benchmarks: `enable` True starts timing (and zeroes the totals),
        False stops it; returns the totals so far (calls and copy/wait/reduce nanoseconds), None without the
        compiled exchange. Off (the default) it costs one branch per call."""
        if self._small is None:
            return None
        if enable is not None:
            self._small.group.set_profile(enable)
        return cast(dict[str, int], self._small.group.profile())

    @property
    def device_path(self) -> str | None:
        """How GPU arrays go: 'nccl', or 'host' (staged through host memory); None before the first device op."""
        return self._device.name

    @property
    def allreduce_path(self) -> str:
        """How large all-reduces go: 'host' (all ranks on one host meet in one shared segment), 'hierarchical'
        (within each host through its segment, across hosts over a ring of one leader per host) or 'ring'."""
        return self._path.name

    def __repr__(self) -> str:
        state = "failed" if self._failed.message else "closed" if self._closed else "open"
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
        if self._async is not None:
            self._async.close("the communicator was closed before this asynchronous all-reduce ran")
        self._device.close()
        self._worker.close()
        self._path.close()
        for peer in self._peers.values():
            peer.close()

    # failure handling: the protocol is collective/failure.py's; these are the hooks the paths call

    def _on_failure(self, lost: PeerLost) -> None:
        self._failed.from_peer(lost, self._label)

    def _fail_now(self, reason: str) -> CollectiveError:
        """This rank failed on its own (not through a peer): abort, and the error to raise."""
        return self._failed.on_own(reason, self._label)

    def _lost_peer(self) -> int | None:
        """A peer that aborted or closed (it wrote to or closed its control connection), else None."""
        return self._failed.lost_peer()

    @contextmanager
    def _operation(self, kind: str) -> Iterator[int]:
        if self._failed.message is not None:
            raise self._failed.error(f"this communicator stopped after an earlier failure ({self._failed.message}); "
                                     "the experiment has to be restarted")
        if self._closed:
            raise CollectiveError("the communicator is closed; collectives only work while the run is active")
        self._seq += 1
        self._label = f"{kind} #{self._seq}"
        recorder = self.timeline
        started = perf_counter_ns() if recorder is not None else 0
        try:
            yield self._seq
        except PeerLost as lost:
            raise self._failed.error(self._failed.from_peer(lost, self._label)) from None
        except CollectiveError:
            raise  # every rank raised it after a complete exchange: the communicator is still in step
        except BaseException:
            self._failed.interrupted(self._label)
            raise
        if recorder is not None:
            recorder.op(kind, self._seq, started, self._peers_in, perf_counter_ns(), self._op_bytes)

    # the header exchange

    def _exchange(self, header: Header, payload: memoryview | None = None, sink: Sink | None = None) -> list[Header]:
        """Send our header (and inline payload) to every peer and read theirs (see `exchange.exchange`)."""
        if self._small is not None:
            headers = self._small.exchange(header, payload, sink, self._peers, self._worker, self._on_failure)
        else:
            headers = exchange(self._peers, self._rank, self._size, header, self._worker, self._on_failure, payload,
                               sink)
        if self.timeline is not None:
            self._peers_in, self._op_bytes = perf_counter_ns(), header.nbytes
        return headers

    def _check(self, header: Header) -> None:
        """Exchange headers and raise the same CollectiveError on every rank if they differ."""
        check_headers(self._exchange(header))

    # the collectives

    def barrier(self) -> None:
        """Return once every rank has called barrier()."""
        self._settle_pending("barrier")
        if self._size == 1:
            return
        with self._operation("barrier") as seq:
            check_headers(self._exchange(Header("barrier", seq, "")))

    def allgather(self, obj: object) -> list[Any]:
        """Every rank's picklable object, in rank order (pickles come only from authenticated peers)."""
        self._settle_pending("allgather")
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
        if self._async is not None:  # inline: a 4 KiB all-reduce takes about a microsecond
            self._settle_pending("allreduce")
        return self._allreduce_now(array, op)

    def _settle_pending(self, what: str) -> None:
        """Before the synchronous collective `what`: wait for the asynchronous all-reduces submitted before it."""
        if self._async is not None and self._async.busy():
            self._async.settle(what)

    def allreduce_async(self, array: ArrayT, op: str = "sum") -> Handle[ArrayT]:
        """Start an all-reduce on the communicator's background thread and return its handle at once.

        The operations run in the order they were submitted (every rank must submit the same sequence), while
        the caller computes; `handle.wait()` returns what `allreduce(array, op)` would have (the same array,
        reduced in place for numpy and cupy) or raises its error. Do not touch the array until then. A
        synchronous collective waits for the pending ones first. cupy arrays: the work queued on the caller's
        current stream is finished before the reduction reads the array."""
        if self._async is None:
            if self._closed:
                raise CollectiveError("the communicator is closed; collectives only work while the run is active")
            self._async = AsyncQueue(f"hopsml-collective-async-{self._rank}", 2 * self.timeout_s + 10)
        self._submitted += 1
        label = f"allreduce_async #{self._submitted} (rank {self._rank})"
        if gpu.is_device_array(array):
            ready = gpu.cupy_module().cuda.Event()
            ready.record()  # on the caller's current stream: what produced the array

            def run_device() -> ArrayT:
                ready.synchronize()
                result = self._allreduce_now(array, op)
                gpu.cupy_module().cuda.get_current_stream().synchronize()
                return result

            return self._async.submit(label, run_device)
        return self._async.submit(label, lambda: self._allreduce_now(array, op))

    def _allreduce_now(self, array: ArrayT, op: str) -> ArrayT:
        """`allreduce` without waiting for pending asynchronous ones (the background thread runs these)."""
        if self._small is not None and type(array) is np.ndarray and self._failed.message is None and \
                not self._closed:
            given = cast(np.ndarray, array)
            entry = self._fast.get((given.dtype, given.shape, op))
            if entry is not None:  # the compiled exchange does it all; anything unusual comes back here
                self._seq += 1
                recorder = self.timeline
                started = perf_counter_ns() if recorder is not None else 0
                status = self._native_call(given, entry, "allreduce")
                if status == native.REDUCED:
                    if recorder is not None:   # the timeline costs two clock reads here, not the general way
                        recorder.op("allreduce", self._seq, started, self._small.group.peers_ns, perf_counter_ns(),
                                    given.nbytes)
                    return cast(ArrayT, array)
                self._seq -= 1  # INELIGIBLE: nothing was published (not contiguous, read-only): the general way
        if gpu.is_device_array(array):
            if self.timeline is not None:
                return self._timed_device("allreduce", lambda: self._device.allreduce(array, op))
            return self._device.allreduce(array, op)
        arr: np.ndarray = array if isinstance(array, np.ndarray) else np.array(array)
        problem = local_problem(arr, op)
        if self._size == 1:
            if problem:
                raise CollectiveError(f"allreduce: {problem}")
            return cast(ArrayT, arr)
        contiguous = arr.flags.c_contiguous
        flat = arr.reshape(-1) if contiguous else np.ascontiguousarray(arr).reshape(-1)
        desc = _describe(arr.dtype, arr.shape)
        self._allreduce_flat("allreduce", flat.view(np.uint8) if not problem else np.empty(0, np.uint8),
                             [(flat.dtype, 0, flat.size)], op, desc, problem)
        if self._small is not None and not problem and contiguous and arr.nbytes <= SMALL_BYTES and \
                arr.dtype in native.DTYPE_CODES and len(self._fast) < 256:
            header = Header("allreduce", 0, desc, op, -1, arr.nbytes, inline=arr.nbytes)
            self._fast[(arr.dtype, arr.shape, op)] = (header.pack(), native.DTYPE_CODES[arr.dtype],
                                                      native.OP_CODES[op])
        if not contiguous:
            arr[...] = flat.reshape(arr.shape)
        return cast(ArrayT, arr)

    def allreduce_many(self, arrays: Sequence[ArrayT], op: str = "sum") -> list[ArrayT]:
        """All-reduce many arrays in one fused operation: one buffer per dtype, one pass, in place.

        Fusion trades a copy into and out of the buffer for a single header exchange and one ring pass
        instead of one per array, which is what makes many small gradients cheap.
        """
        self._settle_pending("allreduce_many")
        given = list(arrays)
        if any(gpu.is_device_array(a) for a in given):
            if self.timeline is not None:
                return self._timed_device("allreduce_many", lambda: self._device.allreduce_many(given, op))
            return self._device.allreduce_many(given, op)
        nd: list[np.ndarray] = [a if isinstance(a, np.ndarray) else np.array(a) for a in given]
        problem = next((f"array {i}: {p}" for i, a in enumerate(nd) if (p := local_problem(a, op))), "")
        if op not in OPS:
            problem = local_problem(np.empty(0), op)
        if self._size == 1:
            if problem:
                raise CollectiveError(f"allreduce_many: {problem}")
            return cast(list[ArrayT], nd)
        layout: Layout = []
        places: list[tuple[int, int]] = []  # per array: (group index, element offset inside the group)
        groups: dict[np.dtype, int] = {}
        counts: list[int] = []
        for a in nd:
            g = groups.setdefault(a.dtype, len(groups))
            if g == len(counts):
                counts.append(0)
            places.append((g, counts[g]))
            counts[g] += a.size
        offset = 0
        for dtype, g in groups.items():
            layout.append((dtype, offset, counts[g]))
            offset += -(-counts[g] * dtype.itemsize // _ALIGN) * _ALIGN
        desc = _fused_description(nd, layout)
        raw = self._scratch.get("fused", offset)[:0 if problem else offset]  # kept across calls

        def region(i: int) -> np.ndarray:
            g, start = places[i]
            dtype, byte_offset, _ = layout[g]
            begin = byte_offset + start * dtype.itemsize
            return raw[begin:begin + nd[i].size * dtype.itemsize].view(dtype)

        if not problem:
            for i, a in enumerate(nd):
                region(i)[...] = a.reshape(-1)
        self._allreduce_flat("allreduce_many", raw, layout, op, desc, problem)
        for i, a in enumerate(nd):
            a[...] = region(i).reshape(a.shape)
        return cast(list[ArrayT], nd)

    def _timed_device(self, name: str, call: Callable[[], ArrayT]) -> ArrayT:
        """A device collective with its GPU time taken by CUDA events (read when the trace is written). Over
        NCCL only: the host-staged path waits for its copies, so its time is the op's own (recorded by the host
        path), and events around it cost about 0.26 ms an op on an H100 (a 4 KiB op took 0.57 ms, not 0.31)."""
        from hopsml.timeline import gpu as timeline_gpu

        recorder = self.timeline
        if recorder is None or self.device_path == "host":
            return call()
        events, start = timeline_gpu.start_events(), perf_counter_ns()
        result = call()
        timeline_gpu.end_events(recorder, events, f"{name} on the GPU ({self._device.name or 'device'})", start,
                                perf_counter_ns())
        return result

    def _native_call(self, array: np.ndarray, entry: tuple[bytes, int, int], kind: str) -> int:
        """A small all-reduce through the compiled exchange, outside `_operation` (its failure handling is here):
        REDUCED, INELIGIBLE (nothing published), else it raises as the general way does."""
        small = cast(native.SmallArea, self._small)
        try:
            status = small.group.allreduce(array, entry[0], self._seq, entry[1], entry[2])
        except BaseException:
            self._label = f"{kind} #{self._seq}"
            self._failed.interrupted(self._label)
            raise
        if status == native.REDUCED or status == native.INELIGIBLE:
            return cast(int, status)
        self._label = f"{kind} #{self._seq}"
        try:
            if status < 0:
                raise small.lost(status)
            flat = array.reshape(-1)
            header = Header.unpack_fixed(entry[0][:FIXED_SIZE])
            desc = entry[0][FIXED_SIZE:].decode("utf-8", "replace")
            assert header is not None
            self._native_rest(replace(header[0], seq=self._seq, desc=desc), flat.view(np.uint8),
                              [(flat.dtype, 0, flat.size)], op=header[0].op)
        except PeerLost as lost:
            raise self._failed.error(self._failed.from_peer(lost, self._label)) from None
        return native.REDUCED

    def _native_rest(self, header: Header, raw: np.ndarray, layout: Layout, op: str) -> None:
        """After the compiled exchange published and waited but did not combine (the headers differ, or a dtype it
        does not combine): check the headers from the slots and combine with numpy, in rank order."""
        small = cast(native.SmallArea, self._small)
        nbytes = raw.size
        stride = -(-nbytes // _ALIGN) * _ALIGN
        rows = self._scratch.get("rows", self._size * stride)[:self._size * stride].reshape(self._size, stride)

        def sink(rank: int, theirs: Header) -> memoryview | None:
            return rows[rank, :nbytes].data if theirs.inline == nbytes else None

        check_headers(small.read(header, header.pack(), sink))
        reduce_rank_ordered(raw, layout, rows, op, self._rank, self._size)

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
                    self._path.allreduce(raw[offset:offset + count * dtype.itemsize].view(dtype), op)
                return
            area = self._small
            if area is not None and not problem and len(layout) == 1:
                dtype = layout[0][0]
                status = area.group.allreduce(raw, header.pack(), -1, native.DTYPE_CODES.get(dtype, -1),
                                              native.OP_CODES[op])
                if self.timeline is not None and status >= 0:   # `_operation` records the op with these
                    self._peers_in, self._op_bytes = area.group.peers_ns, nbytes
                if status == native.REDUCED:
                    return
                if status < 0:
                    raise area.lost(status)
                if status == native.EXCHANGED:
                    self._native_rest(header, raw, layout, op)
                    return
            stride = -(-nbytes // _ALIGN) * _ALIGN
            rows = self._scratch.get("rows", self._size * stride)[:self._size * stride].reshape(self._size, stride)

            def sink(rank: int, theirs: Header) -> memoryview | None:
                return rows[rank, :nbytes].data if theirs.inline == nbytes else None

            check_headers(self._exchange(header, raw.data, sink))
            reduce_rank_ordered(raw, layout, rows, op, self._rank, self._size)

    def broadcast(self, array: ArrayT, root: int = 0) -> ArrayT:
        """Overwrite the array on every rank with root's; in place, returned. Every rank passes an array of
        the same dtype and shape."""
        self._settle_pending("broadcast")
        if gpu.is_device_array(array):
            return self._device.broadcast(array, root)
        problem = ""
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < self._size:
            problem, root = f"root {root!r} is not a rank in [0, {self._size})", -1
        arr: np.ndarray
        if isinstance(array, np.ndarray):
            arr = array
        else:
            if self._rank != root:
                problem = problem or (f"broadcast needs a numpy array to receive into, got {type(array).__name__}")
            arr = np.array(array)
        if not arr.flags.writeable and self._rank != root:
            problem = problem or "the array is read-only; broadcast writes root's data into it"
        if self._size == 1:
            if problem:
                raise CollectiveError(f"broadcast: {problem}")
            return cast(ArrayT, arr)
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
                    return raw.data if rank == root and matches(expected, theirs) else None

                check_headers(self._exchange(header, raw.data, sink))
            else:
                check_headers(self._exchange(header))
                me, n = self._rank, self._size
                chain_broadcast(flat.view(np.uint8), root, me, n, self._peers[(me - 1) % n], self._peers[(me + 1) % n],
                                self._worker, self._on_failure, SEGMENT_BYTES)
        if not contiguous and self._rank != root:
            arr[...] = flat.reshape(arr.shape)
        return cast(ArrayT, arr)
