"""System metrics of a rank's process, sampled every few seconds: CPU %, resident memory, MiB the host's network
interfaces received and sent since the rank started (as /proc shows them to the process: its network namespace,
so ranks sharing a host count each other's traffic), and GPU
utilisation and memory where pynvml or cupy and a GPU are there. Linux /proc; elsewhere only what `resource`
gives."""

from __future__ import annotations

import os
import resource
import time
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _net_bytes() -> tuple[int, int] | None:
    """(received, sent) over every interface of the process's network namespace."""
    try:
        with open("/proc/self/net/dev", encoding="ascii") as f:
            lines = f.read().splitlines()[2:]
    except OSError:
        return None
    received = sent = 0
    for line in lines:
        fields = line.split(":", 1)[1].split()
        received += int(fields[0])
        sent += int(fields[8])
    return received, sent


def _gpu() -> dict[str, float]:
    """GPU utilisation (%) and memory in use (MiB) of the current device, when a GPU library can tell."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0] or 0)
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return {"gpu_util_pct": float(util.gpu), "gpu_mem_mib": memory.used / 2**20}
    except Exception:  # noqa: BLE001 - no pynvml, no driver, no GPU: try cupy, else nothing
        pass
    try:
        import sys

        cupy = sys.modules.get("cupy")  # only when the rank uses cupy already: never start CUDA for a sample
        if cupy is None:
            return {}
        free, total = cupy.cuda.runtime.memGetInfo()
        return {"gpu_mem_mib": (total - free) / 2**20}
    except Exception:  # noqa: BLE001
        return {}


class Sampler:
    """Takes samples; CPU % is the process's CPU time over the wall time since the previous sample, so the first
    sample (taken as the function starts) has none: a window of a few milliseconds would make a peak of nothing."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None  # (monotonic, process_time) at the previous sample
        self._net_start = _net_bytes()
        self.peaks: dict[str, float] = {}

    def sample(self) -> dict[str, float]:
        now, cpu = time.monotonic(), time.process_time()
        values: dict[str, float] = {}
        if self._last is not None:
            wall = now - self._last[0]
            values["cpu_pct"] = round(100.0 * (cpu - self._last[1]) / wall, 1) if wall > 0 else 0.0
        values["rss_mib"] = round(_rss_bytes() / 2**20, 1)
        self._last = (now, cpu)
        net, start = _net_bytes(), self._net_start
        if net is not None and start is not None:
            values["net_recv_mib"] = round((net[0] - start[0]) / 2**20, 1)
            values["net_sent_mib"] = round((net[1] - start[1]) / 2**20, 1)
        values.update(_gpu())
        for key, value in values.items():
            self.peaks[key] = max(self.peaks.get(key, value), value)
        return values


def peaks(samples: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The per-rank peaks for the record's summary."""
    return {str(rank): {k: round(float(v), 1) for k, v in values.items()} for rank, values in sorted(samples.items())}
