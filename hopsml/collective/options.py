"""What a communicator is told at connect: its timeout, whether to use shared memory, the host identity
and the GPU path. The launcher builds it from the run's settings snapshot on the driver, so every rank
follows the driver's values; code that connects ranks itself (tests, a script) resolves the settings here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hopsml import config


@dataclass(frozen=True)
class CollectiveOptions:
    """The collective's settings, fixed for the life of a communicator."""

    timeout_s: float = 300.0
    shared_memory: bool = True
    host_id: str = ""  # empty: the host's own identity
    gpu_mode: str = "auto"  # auto, nccl or host

    @classmethod
    def from_settings(cls, settings: Any, timeout_s: float | None = None) -> CollectiveOptions:
        """From a resolved `config.Settings` (the run's snapshot); `timeout_s` overrides its timeout."""
        return cls(timeout_s=float(timeout_s) if timeout_s is not None else settings.collective_timeout_s,
                   shared_memory=settings.collective_shm, host_id=settings.collective_host_id,
                   gpu_mode=settings.gpu_collective)

    @classmethod
    def resolve(cls, timeout_s: float | None = None) -> CollectiveOptions:
        """From this process's settings (argument > HOPSML_* > hopsml.toml > default), for ranks connected
        without the launcher."""
        return cls(timeout_s=config.value("collective_timeout_s", timeout_s),
                   shared_memory=config.value("collective_shm"), host_id=config.value("collective_host_id"),
                   gpu_mode=config.value("gpu_collective"))
