"""The GPU path: NCCL through cupy for cupy arrays, bootstrapped over the authenticated TCP communicator.

cupy is imported lazily, only when a cupy array reaches a collective, so this package imports and runs
without it. At the first device collective the ranks agree on a path in one TCP allgather: each rank
offers whether it has NCCL, which physical GPU it is on (UUID, else host + PCI bus id) and its
options' gpu_mode (the gpu_collective setting, $HOPSML_GPU_COLLECTIVE), and rank 0 adds an NCCL unique id.
Then, identically on every rank:

- NCCL (the default, 'auto') when every rank has it and every rank is on its own GPU: each rank builds
  `nccl.NcclCommunicator(size, uid, rank)` on its current device (the launcher pins one GPU per rank).
- The host-staged path (device -> host -> TCP ring -> device), with one log line saying why, when ranks
  share one physical GPU (NCCL does not support two ranks on one device: it crashes or hangs), when a
  rank has no NCCL, or when HOPSML_GPU_COLLECTIVE=host.
- A CollectiveError on every rank when HOPSML_GPU_COLLECTIVE=nccl forces NCCL and it cannot work.

NCCL operations are enqueued on cupy's current stream, in place; 'mean' is a sum followed by a division
on the device (floor division for integers, as on the CPU path). dtypes NCCL cannot reduce (bool,
complex) always take the host path. Before each NCCL call the ranks still exchange the usual header
over TCP, so a shape, dtype or op mismatch raises CollectiveError instead of corrupting memory.

An NCCL call never hangs: after enqueuing it, the rank waits for the stream while polling the
communicator's `check_async_error()`, its peers' control connections (a peer that died or aborted
closes or writes to it) and the collective timeout; on any of them the NCCL communicator is aborted
(`ncclCommAbort` ends the kernels still waiting) and the caller raises a CollectiveError naming the
rank and the cause.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol

from hopsml.collective.options import GPU_MODE_ENV, GPU_MODES
from hopsml.errors import CollectiveError

logger = logging.getLogger(__name__)

MODE_ENV = GPU_MODE_ENV
MODES = GPU_MODES

_NCCL_DTYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
                "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16",
                "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}
_NCCL_OPS = {"sum": "NCCL_SUM", "mean": "NCCL_SUM", "min": "NCCL_MIN", "max": "NCCL_MAX"}

_POLL_MAX_S = 0.001  # longest sleep between two looks at the stream
_PEER_CHECK_S = 0.01  # how often the peers' control connections are looked at
GRACE_S = 1.0  # a peer that closed may simply have finished: give our own operation this long to complete


class NcclFailure(Exception):
    """Internal: an NCCL wait ended badly (the communicator is already aborted); `peer` names a lost peer."""

    def __init__(self, reason: str, peer: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.peer = peer


class Abortable(Protocol):
    """What the wait needs from an NCCL communicator (cupy.cuda.nccl.NcclCommunicator has both)."""

    def check_async_error(self) -> None: ...

    def abort(self) -> None: ...


def is_device_array(value: object) -> bool:
    """True for a cupy array, decided without importing cupy."""
    return type(value).__module__.partition(".")[0] == "cupy"


def cupy_module() -> ModuleType:
    import cupy
    return cupy


def nccl_module() -> ModuleType | None:
    """cupy's NCCL binding, or None when cupy was built without it."""
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None
    return nccl if getattr(nccl, "available", True) else None


def nccl_supports(dtype: object) -> bool:
    return str(dtype) in _NCCL_DTYPES


def device_identity(cupy: ModuleType | None = None) -> str:
    """Which physical GPU the current device is, comparable across processes and hosts."""
    cupy = cupy or cupy_module()
    device = cupy.cuda.Device()
    try:
        uuid = cupy.cuda.runtime.getDeviceProperties(device.id).get("uuid")
    except (AttributeError, TypeError):
        uuid = None
    if uuid:
        return "GPU-" + (uuid.hex() if isinstance(uuid, (bytes, bytearray)) else str(uuid))
    return f"{socket.gethostname()} PCI {device.pci_bus_id}"


def setup_offer(rank: int, nccl: ModuleType | None, identity: str, mode: str) -> dict[str, Any]:
    """What this rank contributes to the GPU path agreement (rank 0 adds the NCCL unique id)."""
    unique_id = nccl.get_unique_id() if nccl is not None and rank == 0 and mode != "host" else None
    return {"nccl": nccl is not None, "device": identity, "mode": mode, "uid": unique_id}


def choose_path(offers: Sequence[dict[str, Any]]) -> str:
    """'' for NCCL, else why the host-staged path is used; the same answer (or error) on every rank."""
    modes = [o["mode"] for o in offers]
    if len(set(modes)) > 1:
        listing = ", ".join(f"rank {r}: {m!r}" for r, m in enumerate(modes))
        raise CollectiveError(f"the ranks disagree on {MODE_ENV} ({listing}); set the same value on every rank")
    mode = modes[0]
    if mode == "host":
        return f"{MODE_ENV}=host"
    by_device: dict[str, list[int]] = {}
    for rank, offer in enumerate(offers):
        by_device.setdefault(offer["device"], []).append(rank)
    shared = [(device, ranks) for device, ranks in by_device.items() if len(ranks) > 1]
    without = [rank for rank, offer in enumerate(offers) if not offer["nccl"]]
    reason = ""
    if shared:
        reason = "; ".join(f"ranks {', '.join(map(str, ranks))} share one GPU ({device})" for device, ranks in shared)
        if mode == "nccl":
            raise CollectiveError(
                f"{reason}, and NCCL needs one GPU per rank ({MODE_ENV}=nccl forbids the host-staged path): give "
                "each rank its own GPU (gpus_per_worker=1 with spark.task.resource.gpu.amount=1 and one GPU "
                f"address per task), or unset {MODE_ENV} to let such ranks go through host memory")
    elif without:
        reason = f"rank(s) {', '.join(map(str, without))} have a cupy without NCCL"
        if mode == "nccl":
            raise CollectiveError(f"{reason} but {MODE_ENV}=nccl: install a cupy build with NCCL on every "
                                  f"host (cupy-cuda12x brings it), or unset {MODE_ENV}")
    return reason


def wait_for(done: Callable[[], bool], comm: Abortable | None, timeout_s: float, lost_peer: Callable[[], int | None],
             what: str) -> None:
    """Wait until `done()`, never longer than `timeout_s`, while watching NCCL and the peers.

    On an asynchronous NCCL error, a lost peer (after a short grace in which the operation may still
    complete: a peer that finished first closes too) or the timeout, `comm` is aborted and NcclFailure
    raised.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    next_peer_check = start + _PEER_CHECK_S
    grace_until: float | None = None
    lost: int | None = None
    delay = 0.0
    while not done():
        if comm is not None:
            try:
                comm.check_async_error()
            except Exception as exc:  # noqa: BLE001 - cupy's NcclError or a CUDA error: the communicator is gone
                _abort(comm)
                raise NcclFailure(f"NCCL reported an error during {what}: {exc}") from None
        now = time.monotonic()
        if lost is None and now >= next_peer_check:
            next_peer_check = now + _PEER_CHECK_S
            lost = lost_peer()
            if lost is not None:
                grace_until = min(deadline, now + GRACE_S)
        if grace_until is not None and now >= grace_until:
            _abort(comm)
            raise NcclFailure(f"rank {lost} closed its connections or aborted while {what} waited for it; "
                              "the NCCL communicator was aborted", peer=lost)
        if now >= deadline:
            _abort(comm)
            raise NcclFailure(f"{what} did not complete within {timeout_s:g} s (the collective timeout); "
                              "a rank may be hung or stuck before the same call; the NCCL communicator was aborted")
        time.sleep(delay)
        delay = min(_POLL_MAX_S, delay * 2 or 2e-5)


def _abort(comm: Abortable | None) -> None:
    if comm is None:
        return
    try:
        comm.abort()
    except Exception as exc:  # noqa: BLE001 - already failing; the first cause is what the user needs
        logger.warning("aborting the NCCL communicator failed too: %s", exc)


class NcclComm:
    """One NCCL communicator over all ranks, on this rank's current GPU; every call waits, bounded."""

    def __init__(self, nccl: ModuleType, size: int, rank: int, unique_id: object, timeout_s: float,
                 lost_peer: Callable[[], int | None]) -> None:
        self._nccl = nccl
        self._size = size
        self._rank = rank
        self._timeout_s = timeout_s
        self._lost_peer = lost_peer
        self._aborted = False
        self._comm = self._create(unique_id)

    def _create(self, unique_id: object) -> Any:
        """ncclCommInitRank blocks until every rank joins, so it runs on a thread and the wait is bounded;
        if it never returns, that thread is abandoned (there is nothing to abort yet)."""
        device = cupy_module().cuda.Device().id
        outcome: dict[str, Any] = {}

        def create() -> None:
            try:
                cupy_module().cuda.Device(device).use()  # the current device is per thread
                outcome["comm"] = self._nccl.NcclCommunicator(self._size, unique_id, self._rank)
            except Exception as exc:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = exc

        thread = threading.Thread(target=create, name=f"hopsml-nccl-init-{self._rank}", daemon=True)
        thread.start()
        try:
            wait_for(lambda: not thread.is_alive(), None, self._timeout_s, self._lost_peer,
                     f"the NCCL set-up of rank {self._rank}")
        except NcclFailure:
            self._aborted = True
            raise
        if "error" in outcome:
            self._aborted = True
            raise NcclFailure(f"creating the NCCL communicator failed on rank {self._rank}: {outcome['error']}")
        return outcome["comm"]

    def _dtype(self, dtype: object) -> int:
        return getattr(self._nccl, _NCCL_DTYPES[str(dtype)])

    def _wait(self, cupy: ModuleType, stream: object, what: str) -> None:
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        try:
            wait_for(lambda: event.done, self._comm, self._timeout_s, self._lost_peer, what)
        except NcclFailure:
            self._aborted = True
            raise

    def allreduce(self, array: Any, op: str) -> None:
        """In place on the current stream; the array may be non-contiguous. Returns once it completed."""
        cupy = cupy_module()
        buf = array if array.flags.c_contiguous else cupy.ascontiguousarray(array)
        if buf.size:
            stream = cupy.cuda.get_current_stream()
            self._comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self._dtype(buf.dtype),
                                 getattr(self._nccl, _NCCL_OPS[op]), stream.ptr)
            self._wait(cupy, stream, f"NCCL allreduce of {buf.dtype}[{buf.size}]")
            if op == "mean":
                if buf.dtype.kind in "iu":
                    cupy.floor_divide(buf, self._size, out=buf)
                else:
                    buf /= self._size
        if buf is not array:
            array[...] = buf

    def broadcast(self, array: Any, root: int) -> None:
        """In place on the current stream; the array may be non-contiguous. Returns once it completed."""
        cupy = cupy_module()
        buf = array if array.flags.c_contiguous else cupy.ascontiguousarray(array)
        if buf.size:
            stream = cupy.cuda.get_current_stream()
            self._comm.bcast(buf.data.ptr, buf.size, self._dtype(buf.dtype), root, stream.ptr)
            self._wait(cupy, stream, f"NCCL broadcast of {buf.dtype}[{buf.size}] from rank {root}")
        if buf is not array:
            array[...] = buf

    def close(self) -> None:
        """Destroy the communicator (an aborted one is already gone)."""
        if not self._aborted:
            self._aborted = True
            self._comm.destroy()
