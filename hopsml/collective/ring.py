"""Data movement of the CPU path: the pipelined ring all-reduce, the chain broadcast, the rank-ordered direct
reduce for small messages, and the send thread they share.

The ring (reduce-scatter, then all-gather) splits the data into one chunk per rank and every chunk into
segments. The calling thread receives segments from the previous rank straight into numpy memory
(`recv_into` a memoryview; no copy of the payload in Python) and combines them in place with a ufunc; a
send thread streams segments to the next rank as soon as they are ready. Sending and receiving at once
means two neighbours that both send large messages can never deadlock, and the segment pipeline keeps
the sockets and the ufunc busy at the same time. Socket I/O and ufuncs release the GIL.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

import numpy as np

from hopsml.collective.peers import Peer
from hopsml.collective.transport import PeerLost

UFUNCS: dict[str, np.ufunc] = {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}

Layout = list[tuple[np.dtype, int, int]]  # (dtype, byte offset, element count) inside a flat byte buffer


def finisher(op: str, dtype: np.dtype, size: int) -> Callable[[np.ndarray], None] | None:
    """What turns a sum into the op's result: division for 'mean' (floor division for integers)."""
    if op != "mean" or size == 1:
        return None
    if dtype.kind in "iu":
        return lambda a: np.floor_divide(a, size, out=a)
    return lambda a: np.divide(a, size, out=a)


def chunk_segments(count: int, size: int, itemsize: int, segment_bytes: int) -> list[list[tuple[int, int]]]:
    """Element ranges: one chunk per rank (sizes differ by at most one), each cut into the same number of
    segments of at most about `segment_bytes`, so that segment j of one step feeds segment j of the next."""
    bounds = [count * i // size for i in range(size + 1)]
    biggest = max(b - a for a, b in zip(bounds, bounds[1:]))
    per_chunk = max(1, -(-biggest * itemsize // segment_bytes))
    return [[(a + (b - a) * j // per_chunk, a + (b - a) * (j + 1) // per_chunk) for j in range(per_chunk)]
            for a, b in zip(bounds, bounds[1:])]


class SendJob:
    __slots__ = ("fn", "done", "error")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.error: BaseException | None = None

    def finish(self) -> None:
        """Wait until the sends are done, and raise what failed in them."""
        self.done.wait()
        if self.error is not None:
            raise self.error


class SendWorker:
    """One long-lived thread per communicator that runs the sending half of a collective."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[SendJob | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None  # started by the first job: a world of one never needs it

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller through the job
                job.error = exc
            job.done.set()

    def submit(self, fn: Callable[[], None]) -> SendJob:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        job = SendJob(fn)
        self._jobs.put(job)
        return job

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=5.0)


class _Progress:
    """How many received segments are done; the sender waits on it before forwarding a segment."""

    def __init__(self) -> None:
        self.done = 0
        self.aborted = False
        self._cond = threading.Condition()

    def advance(self) -> None:
        with self._cond:
            self.done += 1
            self._cond.notify()

    def abort(self) -> None:
        with self._cond:
            self.aborted = True
            self._cond.notify_all()

    def wait_for(self, n: int) -> bool:
        if self.done >= n:
            return True
        with self._cond:
            while self.done < n and not self.aborted:
                self._cond.wait()
        return not self.aborted


def run_pipeline(worker: SendWorker, on_failure: Callable[[PeerLost], None],
                 send_peer: Peer, sends: Sequence[memoryview], needs: Sequence[int],
                 recv_peer: Peer, recvs: Sequence[memoryview],
                 on_received: Callable[[int], None] | None = None) -> None:
    """Send `sends[i]` once `needs[i]` received segments are done, while receiving `recvs` in order.

    `on_failure` runs as soon as either side fails (on the send thread for a failed send), so that it can
    record the cause and shut the sockets down, waking the other side at once. Raises PeerLost.
    """
    progress = _Progress()

    def send_all() -> None:
        try:
            for view, need in zip(sends, needs):
                if need and not progress.wait_for(need):
                    return
                if len(view):
                    send_peer.send((view,))
        except PeerLost as lost:
            on_failure(lost)
            raise

    job = worker.submit(send_all) if sends else None
    try:
        for index, view in enumerate(recvs):
            if len(view):
                recv_peer.recv_into(view)
            if on_received is not None:
                on_received(index)
            progress.advance()
    except PeerLost as lost:
        on_failure(lost)  # shuts the sockets down, which also ends a send blocked on a live peer
        progress.abort()
        if job is not None:
            job.done.wait()
        raise
    except BaseException:
        progress.abort()  # the communicator aborts on the way out, which ends the sends
        raise
    if job is not None:
        job.finish()


class Scratch:
    """Buffers kept by a communicator across calls, so that a collective does not allocate (and fault in
    fresh pages) every time; they grow to the largest size asked for."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, nbytes: int) -> np.ndarray:
        """A uint8 buffer of at least `nbytes` bytes (its contents are whatever the last user left)."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < nbytes:
            buffer = self._buffers[name] = np.empty(max(nbytes, 64), dtype=np.uint8)
        return buffer


def ring_allreduce(flat: np.ndarray, op: str, rank: int, size: int, prev: Peer, next_: Peer,
                   worker: SendWorker, on_failure: Callable[[PeerLost], None], segment_bytes: int) -> None:
    """All-reduce the 1-D contiguous array in place around the ring prev -> rank -> next.

    The reduce-scatter segments from the previous rank are combined into ours by that peer's `recv_reduce`
    (from shared memory straight out of the ring, from TCP through the peer's buffer); the all-gather
    segments are received in place."""
    ufunc = UFUNCS[op]
    finish = finisher(op, flat.dtype, size)
    itemsize = flat.itemsize
    chunks = chunk_segments(flat.size, size, itemsize, segment_bytes)
    per_chunk = len(chunks[0])
    raw = flat.view(np.uint8).data
    scatter_steps = size - 1

    def chunk_sent(step: int) -> int:
        return (rank - step) % size if step < scatter_steps else (rank + 1 - (step - scatter_steps)) % size

    def chunk_received(step: int) -> int:
        return (rank - step - 1) % size if step < scatter_steps else (rank - (step - scatter_steps)) % size

    steps = 2 * scatter_steps
    reduced_items = scatter_steps * per_chunk
    empty = memoryview(b"")
    sends: list[memoryview] = []
    needs: list[int] = []
    recvs: list[memoryview] = []
    targets: list[tuple[int, int]] = []
    for step in range(steps):
        sent, received = chunks[chunk_sent(step)], chunks[chunk_received(step)]
        for j in range(per_chunk):
            a, b = sent[j]
            sends.append(raw[a * itemsize:b * itemsize])
            # segment j of this step forwards what segment j of the previous step received
            needs.append((step - 1) * per_chunk + j + 1 if step else 0)
            a, b = received[j]
            targets.append((a, b))
            # reduce-scatter segments are combined in on_received, by the peer; all-gather ones land in place
            recvs.append(empty if len(recvs) < reduced_items else raw[a * itemsize:b * itemsize])

    last_reduce_step = scatter_steps - 1

    def on_received(index: int) -> None:
        if index >= reduced_items:
            return
        a, b = targets[index]
        if a == b:
            return
        dst = flat[a:b]
        prev.recv_reduce(dst, ufunc)
        if finish is not None and index // per_chunk == last_reduce_step:
            finish(dst)

    run_pipeline(worker, on_failure, next_, sends, needs, prev, recvs, on_received)


def chain_broadcast(flat: np.ndarray, root: int, rank: int, size: int, prev: Peer, next_: Peer,
                    worker: SendWorker, on_failure: Callable[[PeerLost], None], segment_bytes: int) -> None:
    """Broadcast the 1-D contiguous array from root along root -> root+1 -> ...; each rank forwards a
    segment as soon as it has it."""
    raw = flat.view(np.uint8).data
    step = max(segment_bytes, 1)
    segments = [raw[i:i + step] for i in range(0, len(raw), step)]
    position = (rank - root) % size
    sends = segments if position < size - 1 else []
    needs = [0] * len(segments) if position == 0 else list(range(1, len(segments) + 1))
    recvs = segments if position > 0 else []
    run_pipeline(worker, on_failure, next_, sends, needs[:len(sends)], prev, recvs)


def reduce_rank_ordered(flat: np.ndarray, layout: Layout, rows: np.ndarray, op: str, rank: int, size: int) -> None:
    """Combine every rank's copy (rows[i], own copy in `flat`) in rank order, so all ranks get identical bits."""
    ufunc = UFUNCS[op]
    for dtype, offset, count in layout:
        end = offset + count * dtype.itemsize
        mine = flat[offset:end].view(dtype)
        acc = mine if rank == 0 else rows[0, offset:end].view(dtype)
        for i in range(1, size):
            ufunc(acc, mine if i == rank else rows[i, offset:end].view(dtype), out=acc)
        finish = finisher(op, dtype, size)
        if finish is not None:
            finish(acc)
        if rank != 0:
            mine[...] = acc
