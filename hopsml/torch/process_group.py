"""torch.distributed inside a rank: a process group from the variables the launcher exports.

The launcher sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in every rank before the
training function starts, so PyTorch's ``env://`` rendezvous works as it does under torchrun:
``torch.distributed.init_process_group("gloo")`` needs no arguments. ``init_process_group()`` here
adds the choice of backend (NCCL when the rank has a GPU, else gloo), the device pinning NCCL needs,
hopsml's collective timeout, and safety for Spark's reused Python workers: a process group left over
from an earlier run in the same worker is destroyed before the new one starts.
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any

from hopsml.collective.timeout import resolve_timeout
from hopsml.errors import NotInRunError, SettingsError
from hopsml.torch._torch import require

log = logging.getLogger(__name__)

_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_BACKENDS = ("gloo", "nccl")
_started: dict[str, Any] = {}  # the key of the group this process started; one rank = one process


def _run_key() -> tuple[str, ...]:
    missing = [name for name in _ENV if not os.environ.get(name)]
    if missing:
        raise NotInRunError(f"hopsml.torch.init_process_group works inside a training function run by "
                            f"experiment.allreduce (or torchrun); {', '.join(missing)} not set here")
    return tuple(os.environ[name] for name in _ENV)


def _cuda_device(torch: Any) -> int:
    """This rank's GPU index in torch's numbering (the launcher exported CUDA_VISIBLE_DEVICES)."""
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    count = torch.cuda.device_count()
    # CUDA may have started in this (reused) worker before the variable was set: then all GPUs show.
    if visible and count != len(visible) and visible[0].isdigit() and int(visible[0]) < count:
        return int(visible[0])
    return 0


def init_process_group(backend: str | None = None, timeout_s: float | None = None) -> Any:
    """Start torch.distributed for this rank (idempotent); returns the default process group.

    ``backend`` defaults to 'nccl' when the rank has a CUDA device, else 'gloo'; ``timeout_s`` to
    the run's collective timeout (setting collective_timeout_s, else 300 s).
    """
    torch = require()
    import torch.distributed as dist

    key = _run_key()
    has_gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    backend = backend or ("nccl" if has_gpu else "gloo")
    if backend not in _BACKENDS:
        raise SettingsError(f"backend={backend!r}: use 'gloo' (CPU tensors) or 'nccl' (CUDA tensors)")
    if backend == "nccl" and not has_gpu:
        raise SettingsError("backend='nccl' needs a CUDA device in this rank; run with gpus_per_worker >= 1 "
                            "or use backend='gloo'")
    if dist.is_initialized():
        if _started.get("key") == key + (backend,):
            return dist.group.WORLD
        # A group from an earlier run in this reused Spark worker (or another backend): start afresh.
        log.info("destroying the process group left from an earlier run in this worker")
        dist.destroy_process_group()
    if backend == "nccl":
        torch.cuda.set_device(_cuda_device(torch))
    timeout = datetime.timedelta(seconds=_timeout_s(timeout_s))
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout)
    _started["key"] = key + (backend,)
    log.info("torch.distributed started: rank %d of %d, backend %s, master %s:%s", rank, world_size, backend,
             *key[2:])
    return dist.group.WORLD


def _timeout_s(given: float | None) -> float:
    """The argument, else the run's collective timeout (the communicator the launcher connected with the
    driver's settings snapshot), else this process's setting."""
    from hopsml.collective import active

    if given is None and active.is_initialized():
        return float(active.current().timeout_s)
    return resolve_timeout(given)


def destroy_process_group() -> None:
    """End torch.distributed in this rank if it runs (call it when training is done); else a no-op.

    Inside a rank of hopsml's the group ends when the function has returned, not now: a
    DistributedDataParallel model that still exists would otherwise free the gloo group from its
    reducer while holding the GIL, and the group's worker threads, which need the GIL to finish,
    deadlock with it (pytorch/pytorch#56297; seen with torch 2.13). The rank's end destroys it
    once the model is gone.
    """
    import sys

    from hopsml.collective import active

    if active.is_initialized():
        return  # the rank's teardown destroys it (end_rank_group)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _started.clear()


def end_rank_group() -> None:
    """A rank's teardown hook (the barrier-task skeleton calls it after the function): Python workers are
    reused, and a torch.distributed group the function left open would make the next run's
    init_process_group in this worker fail. destroy_process_group leaves the group to this point, when
    the function's models are gone (see there why). Imports no torch that the function did not."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _started.clear()
