"""The current communicator, and the module-level collectives that training code calls inside each rank.

`use(comm)` makes a communicator current for a block (a context variable, so nested or concurrent uses do
not leak into each other); `init(...)` installs one for the whole process until `shutdown()`. The launcher
does one or the other around the user's training function.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from socket import socket
from typing import Any, TypeVar

from hopsml.collective.communicator import Communicator
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.pending import Handle
from hopsml.errors import HopsmlError, NotInRunError

ArrayT = TypeVar("ArrayT")

_current: ContextVar[Communicator | None] = ContextVar("hopsml_collective_communicator", default=None)


class _ProcessDefault:
    """The communicator `init` installed for this process (one rank = one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._comm: Communicator | None = None

    def get(self) -> Communicator | None:
        return self._comm

    def install(self, comm: Communicator) -> None:
        with self._lock:
            if self._comm is not None:
                raise HopsmlError(f"collective.init was already called in this process ({self._comm!r}); "
                                  "call collective.shutdown() first")
            self._comm = comm

    def remove(self) -> Communicator | None:
        with self._lock:
            comm, self._comm = self._comm, None
            return comm


_process_default = _ProcessDefault()


def current() -> Communicator:
    """The communicator the collectives use here; raises NotInRunError outside a distributed run."""
    comm = _current.get() or _process_default.get()
    if comm is None:
        raise NotInRunError("hopsml.collective functions only work inside a training function run by "
                            "experiment.allreduce (or after collective.init(...) in this process); "
                            "there is no communicator here")
    return comm


def is_initialized() -> bool:
    """Whether a communicator is current, i.e. whether the collectives can be called."""
    return (_current.get() or _process_default.get()) is not None


@contextmanager
def use(comm: Communicator) -> Iterator[Communicator]:
    """Make `comm` the current communicator inside the block (the caller still owns and closes it)."""
    token = _current.set(comm)
    try:
        yield comm
    finally:
        _current.reset(token)


def init(rank: int, size: int, addresses: Sequence[str], listener: socket | None, secret: bytes,
         timeout_s: float | None = None, *, options: CollectiveOptions | None = None) -> Communicator:
    """Connect (see `Communicator.connect`) and install the communicator for this process."""
    comm = Communicator.connect(rank, size, addresses, listener, secret, timeout_s, options=options)
    try:
        _process_default.install(comm)
    except BaseException:
        comm.close()
        raise
    return comm


def shutdown() -> None:
    """Close and remove the communicator `init` installed; a no-op if there is none."""
    comm = _process_default.remove()
    if comm is not None:
        comm.close()


def rank() -> int:
    """This rank's number, 0 .. size()-1."""
    return current().rank


def size() -> int:
    """The number of ranks."""
    return current().size


def allreduce(array: ArrayT, op: str = "sum") -> ArrayT:
    """Combine `array` over all ranks ('sum', 'mean', 'min', 'max'), in place for numpy/cupy arrays."""
    return current().allreduce(array, op)


def allreduce_async(array: ArrayT, op: str = "sum") -> Handle[ArrayT]:
    """Start an all-reduce in the background; `handle.wait()` gives what `allreduce` would (see
    `Communicator.allreduce_async`)."""
    return current().allreduce_async(array, op)


def allreduce_many(arrays: Sequence[ArrayT], op: str = "sum") -> list[ArrayT]:
    """All-reduce many arrays in one fused pass (one buffer per dtype), in place."""
    return current().allreduce_many(arrays, op)


def broadcast(array: ArrayT, root: int = 0) -> ArrayT:
    """Overwrite `array` on every rank with root's, in place."""
    return current().broadcast(array, root)


def allgather(obj: object) -> list[Any]:
    """Every rank's picklable object, in rank order."""
    return current().allgather(obj)


def barrier() -> None:
    """Wait until every rank got here."""
    current().barrier()
