"""The GPU path: NCCL through cupy for cupy arrays, bootstrapped over the authenticated TCP communicator.

cupy is imported lazily, only when a cupy array reaches a collective, so this package imports and runs
without it. With `cupy.cuda.nccl` available, rank 0 creates an NCCL unique id, the TCP communicator
hands it to every rank, and each rank builds `nccl.NcclCommunicator(size, uid, rank)` on its current
device (the launcher pins one GPU per rank before the training function runs). Operations are enqueued
on cupy's current stream, in place. 'mean' is an NCCL sum followed by a division on the device (floor
division for integers, as on the CPU path). Without NCCL, or for dtypes NCCL cannot reduce (bool,
complex), the data goes through host memory and the CPU ring; that is logged once per communicator.

Before each NCCL call the ranks still exchange the usual header over TCP, so a shape, dtype or op
mismatch raises CollectiveError instead of corrupting memory, and a dead peer is noticed before a
kernel that would wait for it forever is enqueued.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

_NCCL_DTYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
                "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16",
                "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}
_NCCL_OPS = {"sum": "NCCL_SUM", "mean": "NCCL_SUM", "min": "NCCL_MIN", "max": "NCCL_MAX"}


def is_device_array(value: object) -> bool:
    """True for a cupy array, decided without importing cupy."""
    return type(value).__module__.partition(".")[0] == "cupy"


def cupy_module() -> ModuleType:
    import cupy  # noqa: PLC0415 - optional dependency, only needed once a cupy array shows up
    return cupy


def nccl_module() -> ModuleType | None:
    """cupy's NCCL binding, or None when cupy was built without it."""
    try:
        from cupy.cuda import nccl  # noqa: PLC0415
    except ImportError:
        return None
    return nccl if getattr(nccl, "available", True) else None


def nccl_supports(dtype: Any) -> bool:
    return str(dtype) in _NCCL_DTYPES


class NcclComm:
    """One NCCL communicator over all ranks, on this rank's current GPU."""

    def __init__(self, nccl: ModuleType, size: int, rank: int, unique_id: tuple) -> None:
        self._nccl = nccl
        self._size = size
        self._comm = nccl.NcclCommunicator(size, unique_id, rank)

    def _dtype(self, dtype: Any) -> int:
        return getattr(self._nccl, _NCCL_DTYPES[str(dtype)])

    def allreduce(self, array: Any, op: str) -> None:
        """In place on the current stream; the array may be non-contiguous."""
        cupy = cupy_module()
        buf = array if array.flags.c_contiguous else cupy.ascontiguousarray(array)
        if buf.size:
            stream = cupy.cuda.get_current_stream()
            self._comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self._dtype(buf.dtype),
                                 getattr(self._nccl, _NCCL_OPS[op]), stream.ptr)
            if op == "mean":
                if buf.dtype.kind in "iu":
                    cupy.floor_divide(buf, self._size, out=buf)
                else:
                    buf /= self._size
        if buf is not array:
            array[...] = buf

    def broadcast(self, array: Any, root: int) -> None:
        cupy = cupy_module()
        buf = array if array.flags.c_contiguous else cupy.ascontiguousarray(array)
        if buf.size:
            stream = cupy.cuda.get_current_stream()
            self._comm.bcast(buf.data.ptr, buf.size, self._dtype(buf.dtype), root, stream.ptr)
        if buf is not array:
            array[...] = buf

    def close(self) -> None:
        self._comm.destroy()
