"""Collectives between the ranks of a distributed run: all-reduce, broadcast, all-gather, barrier.

Inside a training function run by `experiment.allreduce`::

    grads = collective.allreduce(grads, op="mean")          # numpy: TCP ring; cupy: NCCL
    collective.allreduce_many([g1, g2, g3], op="mean")      # fused: one pass for many small arrays
    handle = collective.allreduce_async(grads)              # in the background, in call order; compute meanwhile
    grads = handle.wait()

Rendezvous, as the launcher does it in each rank (and tests do with multiprocessing)::

    listener, address = collective.listen(host)             # 1. listen first, keep the socket open
    addresses = exchange_once(address)                      # 2. e.g. BarrierTaskContext.allGather
    with collective.Communicator.connect(rank, size, addresses, listener, secret) as comm, \\
            collective.use(comm):                           # 3. authenticated full mesh
        train()

`connect` follows a `CollectiveOptions` (timeout, shared memory, host identity, GPU mode): the launcher passes
the run's (`CollectiveOptions.from_settings`); without one, this process's settings (`resolve`).

Imports neither pyspark nor cupy; cupy is loaded only when a cupy array reaches a collective.
"""

from hopsml.collective.active import (
    allgather,
    allreduce,
    allreduce_async,
    allreduce_many,
    barrier,
    broadcast,
    current,
    init,
    is_initialized,
    rank,
    shutdown,
    size,
    use,
)
from hopsml.collective.communicator import Communicator
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.pending import Handle
from hopsml.collective.timeout import DEFAULT_TIMEOUT_S, TIMEOUT_ENV
from hopsml.collective.transport import listen

__all__ = ["CollectiveOptions", "Communicator", "DEFAULT_TIMEOUT_S", "Handle", "TIMEOUT_ENV", "allgather", "allreduce",
           "allreduce_async", "allreduce_many", "barrier", "broadcast", "current", "init", "is_initialized", "listen",
           "rank", "shutdown", "size", "use"]
