"""A minimal stand-in for cupy and cupy.cuda.nccl, for the GPU path's control logic on machines without a GPU.

Arrays are numpy arrays of a subclass that claims to come from cupy; "GPU memory" is host memory. The
fake NCCL communicator reduces nothing: it only does what a test tells it (complete, hang, raise an
asynchronous error, or kill the process) and records what was done to it. Real data movement over NCCL
is checked on a GPU by bench/gpu_smoke.py.
"""

from __future__ import annotations

import os
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class State:
    """What the fake does (`behaviour`: 'complete', 'hang', 'error' or 'die') and what happened to it."""

    device: str = "fake-gpu-0"
    behaviour: str = "complete"
    pending: bool = False
    created: int = 0
    aborted: bool = False
    destroyed: bool = False
    calls: list[str] = field(default_factory=list)


class ndarray(np.ndarray):  # noqa: N801 - cupy's name
    """A host array that `hopsml.collective.gpu.is_device_array` takes for a cupy array."""

    @property
    def data(self) -> Any:  # cupy: a memory pointer with .ptr
        return types.SimpleNamespace(ptr=self.ctypes.data)


ndarray.__module__ = "cupy"


def install(device: str = "fake-gpu-0", behaviour: str = "complete") -> State:
    """Put fake `cupy`, `cupy.cuda` and `cupy.cuda.nccl` modules into sys.modules; returns their state."""
    state = State(device=device, behaviour=behaviour)

    class NcclError(RuntimeError):
        pass

    class NcclCommunicator:
        def __init__(self, size: int, unique_id: Any, rank: int) -> None:
            state.created += 1
            state.calls.append(f"init size={size} rank={rank}")

        def _enqueue(self, name: str) -> None:
            state.calls.append(name)
            if state.behaviour == "die":
                os._exit(3)
            state.pending = state.behaviour != "complete"

        def allReduce(self, send: int, recv: int, count: int, dtype: int, op: int, stream: int) -> None:  # noqa: N802
            self._enqueue("allReduce")

        def bcast(self, buf: int, count: int, dtype: int, root: int, stream: int) -> None:
            self._enqueue("bcast")

        def check_async_error(self) -> None:
            if state.behaviour == "error" and state.pending:
                raise NcclError("NCCL_ERROR_SYSTEM_ERROR: unhandled system error")

        def abort(self) -> None:
            state.aborted, state.pending = True, False

        def destroy(self) -> None:
            state.destroyed = True

    class Event:
        def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
            self.at: float | None = None

        def record(self, stream: Any = None) -> None:
            self.at = time.perf_counter()   # the "GPU" runs on the host: its work is done when recorded

        def synchronize(self) -> None:
            pass

        @property
        def done(self) -> bool:
            return not state.pending

    class Device:
        def __init__(self, device: int | None = None) -> None:
            self.id = 0 if device is None else device
            self.pci_bus_id = f"0000:{self.id:02x}:00.0"

        def use(self) -> None:
            pass

    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = True
    nccl.NcclCommunicator, nccl.NcclError = NcclCommunicator, NcclError
    nccl.get_unique_id = lambda: (7,) * 128
    for i, name in enumerate(["INT8", "UINT8", "INT32", "UINT32", "INT64", "UINT64", "FLOAT16", "FLOAT32", "FLOAT64"]):
        setattr(nccl, f"NCCL_{name}", i)
    for i, name in enumerate(["SUM", "PROD", "MAX", "MIN"]):
        setattr(nccl, f"NCCL_{name}", i)

    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl, cuda.Event, cuda.Device = nccl, Event, Device
    class Stream:
        null = types.SimpleNamespace(synchronize=lambda: None)

        def __init__(self, non_blocking: bool = False) -> None:
            self.ptr = 0

        def __enter__(self) -> Stream:
            return self

        def __exit__(self, *exc_info: object) -> None:
            return None

        def synchronize(self) -> None:
            pass

    cuda.Stream = Stream
    cuda.get_current_stream = Stream
    cuda.get_elapsed_time = lambda start, end: (end.at - start.at) * 1e3
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1,
                                         getDeviceProperties=lambda i: {"uuid": state.device.encode()})

    cupy = types.ModuleType("cupy")
    cupy.cuda, cupy.ndarray = cuda, ndarray
    cupy.asarray = lambda a, dtype=None: np.array(a, dtype=dtype).view(ndarray)
    cupy.asnumpy = lambda a: np.array(a).view(np.ndarray)
    cupy.ascontiguousarray = lambda a: np.ascontiguousarray(a).view(ndarray)
    cupy.concatenate = lambda arrays: np.concatenate(arrays).view(ndarray)
    cupy.floor_divide = np.floor_divide
    cupy.ones = lambda shape, dtype=float: np.ones(shape, dtype=dtype).view(ndarray)
    cupy.random = types.SimpleNamespace(default_rng=lambda seed: types.SimpleNamespace(
        standard_normal=lambda shape, dtype=float: np.random.default_rng(seed).standard_normal(shape, dtype=dtype)
        .view(ndarray)))
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl})
    return state
