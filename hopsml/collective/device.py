"""Collectives of cupy arrays for one communicator: NCCL, or through host memory and the CPU path.

The communicator makes this object at connect with its options' gpu_mode; cupy is imported, and the ranks
agree on NCCL or the host-staged path (`gpu.choose_path`, one allgather), only when the first cupy array
reaches a collective, so that a CPU-only job never loads it. Before each NCCL call the ranks exchange the
usual header, so a mismatch raises the same CollectiveError on every rank instead of corrupting memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import numpy as np

from hopsml.collective import gpu
from hopsml.collective.protocol import OPS, Header, describe_array
from hopsml.collective.transport import PeerLost
from hopsml.errors import CollectiveError

logger = logging.getLogger(__name__)

_REDUCIBLE_KINDS = "biufc"

ArrayT = TypeVar("ArrayT")


class DeviceHost(Protocol):
    """What the device collectives need from their communicator (its own collectives for the host-staged
    path, and its operation bookkeeping around each NCCL call)."""

    timeout_s: float

    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    def allgather(self, obj: object) -> list[Any]: ...

    def allreduce(self, array: object, op: str = "sum") -> Any: ...

    def broadcast(self, array: object, root: int = 0) -> Any: ...

    def _operation(self, kind: str) -> AbstractContextManager[int]:
        """One collective: its sequence number; a PeerLost inside becomes the communicator's failure."""
        ...

    def _check(self, header: Header) -> None:
        """Exchange headers with every peer and raise the same CollectiveError on every rank if they differ."""

    def _lost_peer(self) -> int | None:
        """A peer that aborted or closed, else None (never blocks)."""
        ...

    def _fail_now(self, reason: str) -> CollectiveError:
        """Record this rank's failure (telling the peers) and return the error to raise."""
        ...


def local_problem(array: Any, op: str | None, writable: bool = True) -> str:
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


class DevicePath:
    """NCCL between the ranks' GPUs where they agree on it, else device -> host -> CPU path -> device."""

    def __init__(self, host: DeviceHost, mode: str) -> None:
        self._host = host
        self._mode = mode
        self._nccl: gpu.NcclComm | None = None
        self._path: str | None = None  # 'nccl' or 'host' once the ranks agreed
        self._error: str | None = None  # the agreement failed (the same on every rank)

    @property
    def name(self) -> str | None:
        """'nccl' or 'host' once the ranks agreed (at the first device collective), else None."""
        return self._path

    def _run_nccl(self, call: Callable[[], Any]) -> Any:
        """Run an NCCL step inside an operation; turn its failure into the communicator's failure."""
        try:
            return call()
        except gpu.NcclFailure as failure:
            if failure.peer is not None:
                raise PeerLost(failure.peer, failure.reason) from None  # the operation names the root cause
            raise self._host._fail_now(failure.reason) from None

    def _comm(self) -> gpu.NcclComm | None:
        """The NCCL communicator, agreed on and created collectively on first use; None for the host path."""
        if self._error is not None:
            raise CollectiveError(self._error)
        host = self._host
        if self._path is None:
            nccl = gpu.nccl_module()
            offers = host.allgather(gpu.setup_offer(host.rank, nccl, gpu.device_identity(), self._mode))
            try:
                reason = gpu.choose_path(offers)
            except CollectiveError as exc:  # the same on every rank: the communicator stays in step
                self._error = str(exc)
                raise
            if reason or nccl is None:
                self._path = "host"
                logger.warning("GPU collectives go through host memory and the TCP ring (slower than NCCL): %s",
                               reason)
            else:
                with host._operation("NCCL set-up"):
                    self._nccl = self._run_nccl(lambda: gpu.NcclComm(nccl, host.size, host.rank, offers[0]["uid"],
                                                                     host.timeout_s, host._lost_peer))
                self._path = "nccl"
        return self._nccl

    def _collective(self, kind: str, array: Any, op: str, root: int, run: Callable[[gpu.NcclComm], None]) -> bool:
        """Header check, then `run` on the NCCL communicator, in one operation; False: use the host path."""
        if self._host.size == 1 or not gpu.nccl_supports(array.dtype):
            return False
        comm = self._comm()
        if comm is None:
            return False
        problem = local_problem(array, op if kind == "allreduce" else None, writable=False)
        desc = describe_array("cuda/nccl", str(array.dtype), array.shape)
        with self._host._operation(kind) as seq:
            self._host._check(Header(kind, seq, problem or desc, op if op in OPS else "", root,
                                     array.size * array.dtype.itemsize, error=bool(problem)))
            self._run_nccl(lambda: run(comm))
        return True

    def allreduce(self, array: ArrayT, op: str) -> ArrayT:
        if self._collective("allreduce", array, op, -1, lambda comm: comm.allreduce(array, op)):
            return array
        if self._host.size > 1 or op not in OPS:
            cupy = gpu.cupy_module()
            staged = self._host.allreduce(cupy.asnumpy(array), op)
            array[...] = cupy.asarray(staged)  # type: ignore[index]
        return array

    def allreduce_many(self, arrays: list[Any], op: str) -> list[Any]:
        cupy = gpu.cupy_module()
        arrays = [a if gpu.is_device_array(a) else cupy.asarray(a) for a in arrays]
        by_dtype: dict[Any, list[int]] = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault(a.dtype, []).append(i)
        for indices in by_dtype.values():
            packed = cupy.concatenate([arrays[i].reshape(-1) for i in indices])
            self.allreduce(packed, op)
            start = 0
            for i in indices:
                n = arrays[i].size
                arrays[i][...] = packed[start:start + n].reshape(arrays[i].shape)
                start += n
        return arrays

    def broadcast(self, array: ArrayT, root: int) -> ArrayT:
        valid_root = isinstance(root, int) and not isinstance(root, bool) and 0 <= root < self._host.size
        if valid_root and self._collective("broadcast", array, "", root, lambda comm: comm.broadcast(array, root)):
            return array
        if self._host.size > 1:
            cupy = gpu.cupy_module()
            staged = self._host.broadcast(cupy.asnumpy(array), root)
            array[...] = cupy.asarray(staged)  # type: ignore[index]
        return array

    def close(self) -> None:
        if self._nccl is not None:
            try:
                self._nccl.close()
            except Exception as exc:  # noqa: BLE001 - closing must go on to the sockets
                logger.warning("destroying the NCCL communicator failed: %s", exc)
