"""The GPUs this process may use (hops-compatible `get_num_gpus()`)."""

from __future__ import annotations

import os
import shutil
import subprocess


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
    """GPU ids this process may use: Spark's task resources, else CUDA_VISIBLE_DEVICES, else the driver's list."""
    assigned = _spark_task_gpus()
    if assigned is not None:
        return assigned
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in (x.strip() for x in visible.split(",")) if d and d != "-1"]
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
