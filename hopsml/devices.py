"""The GPUs this process may use (hops-compatible `get_num_gpus()`), and how Spark's GPU addresses map to them.

Spark's resource scheduling gives a task GPU *addresses*: whatever the discovery script printed. When the
executor already runs with CUDA_VISIBLE_DEVICES set (YARN, Kubernetes and many cluster managers restrict
it so), those addresses are indices into that list, as Spark's TorchDistributor reads them: with
CUDA_VISIBLE_DEVICES="4,5,6,7" and address "1" the task owns physical GPU 5, and its rank runs with
CUDA_VISIBLE_DEVICES="5".
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from hopsml.errors import ClusterError

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def parse_visible(visible: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of ids (None when unset; '-1' or '' hide every GPU)."""
    if visible is None:
        return None
    ids = [d for d in (x.strip() for x in visible.split(",")) if d]
    return [] if ids[:1] == ["-1"] else ids


def physical_gpus(addresses: Sequence[str], visible: str | None) -> list[str]:
    """The GPU ids a task owns: Spark's `addresses` mapped through the executor's CUDA_VISIBLE_DEVICES.

    >>> physical_gpus(["1"], "4,5,6,7")
    ['5']
    >>> physical_gpus(["0", "2"], None)
    ['0', '2']
    """
    ids = parse_visible(visible)
    if ids is None:
        return [str(a) for a in addresses]
    mapped = []
    for address in map(str, addresses):
        if address in ids and not address.isdigit():  # a UUID or MIG name that is itself visible
            mapped.append(address)
            continue
        if not address.isdigit() or int(address) >= len(ids):
            raise ClusterError(
                f"Spark assigned GPU address {address!r}, but this executor runs with {VISIBLE_ENV}={visible!r} "
                f"({len(ids)} visible GPUs), and addresses are read as indices into that list: make the GPU "
                f"discovery script print indices 0..{max(len(ids) - 1, 0)} of the visible GPUs, or start the "
                f"executors without {VISIBLE_ENV}")
        mapped.append(ids[int(address)])
    if len(set(mapped)) != len(mapped):
        raise ClusterError(f"Spark's GPU addresses {list(addresses)} name the same GPU twice through "
                           f"{VISIBLE_ENV}={visible!r}; fix the GPU discovery script")
    return mapped


def _spark_task_gpus() -> list[str] | None:
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    ctx = TaskContext.get()
    if ctx is None:
        return None
    gpu = ctx.resources().get("gpu")
    return list(gpu.addresses) if gpu is not None else None


def visible_gpus() -> list[str]:
    """GPU ids this process may use: Spark's task resources, else CUDA_VISIBLE_DEVICES, else the driver's list.

    Inside a task, Spark's addresses are mapped through CUDA_VISIBLE_DEVICES; inside a rank that variable
    already names exactly the rank's GPUs (as many as Spark assigned), and is returned as it is.
    """
    visible = os.environ.get(VISIBLE_ENV)
    ids = parse_visible(visible)
    assigned = _spark_task_gpus()
    if assigned is not None:
        if ids is not None and len(ids) == len(assigned):
            return ids
        return physical_gpus(assigned, visible)
    if ids is not None:
        return ids
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in listing.splitlines() if line.startswith("GPU "))]


def get_num_gpus() -> int:
    """How many GPUs this process (a rank, a trial, or the driver) can use."""
    return len(visible_gpus())


def check_gpu_amount(gpus_per_worker: int, task_amount: str | None) -> None:
    """Refuse a stage whose ranks would not get the GPUs asked for; the message names the conf to set."""
    if not gpus_per_worker:
        return
    if task_amount is None:
        raise ClusterError(f"gpus_per_worker={gpus_per_worker} but Spark does not schedule GPUs: set "
                           f"spark.task.resource.gpu.amount={gpus_per_worker}, spark.executor.resource.gpu.amount "
                           "and a discovery script (spark.executor.resource.gpu.discoveryScript)")
    try:
        amount = float(task_amount)
    except ValueError:
        raise ClusterError(f"spark.task.resource.gpu.amount is {task_amount!r}, not a number; set it to "
                           f"{gpus_per_worker}") from None
    if amount != gpus_per_worker:
        if amount >= 1 and amount.is_integer():
            other = f", or pass gpus_per_worker={int(amount)}"
        else:
            other = " (a fraction shares one GPU between tasks; each rank needs whole GPUs)"
        raise ClusterError(f"gpus_per_worker={gpus_per_worker} but spark.task.resource.gpu.amount={task_amount}: "
                           "each rank gets the GPUs Spark gives its task, so set spark.task.resource.gpu.amount="
                           f"{gpus_per_worker} (and spark.executor.resource.gpu.amount to at least that){other}")
