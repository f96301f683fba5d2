"""What a communicator is told at connect: its timeout, whether to use shared memory, the host identity
and the GPU path. The launcher builds it from the run's settings snapshot on the driver, so every rank
follows the driver's values; code that connects ranks itself (tests, a script) resolves the settings here.

`resolve` is the collective's only look at this process's environment: the communicator and its paths read
nothing but the options object they were given at connect.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from hopsml import config
from hopsml.collective.timeout import DEFAULT_TIMEOUT_S, TIMEOUT_ENV
from hopsml.errors import SettingsError

GPU_MODES = ("auto", "nccl", "host")
# The environment variables that `resolve` reads (through hopsml.config), by the settings' names.
SHM_ENV = config.ENV_PREFIX + "COLLECTIVE_SHM"  # false keeps every pair of ranks on TCP
HOST_ID_ENV = config.ENV_PREFIX + "COLLECTIVE_HOST_ID"  # replaces the host identity; tests fake several hosts
GPU_MODE_ENV = config.ENV_PREFIX + "GPU_COLLECTIVE"
# 0/false: the ranks of one host use the pure-Python small exchange even where the compiled one is built (tests
# and benchmarks compare the two with it); read here, beside the settings, as the one look at the environment
NATIVE_ENV = config.ENV_PREFIX + "COLLECTIVE_NATIVE"


def native_from_environment() -> bool:
    """Whether the compiled same-host path may be used (NATIVE_ENV, default yes)."""
    text = os.environ.get(NATIVE_ENV, "").strip().lower()
    if text in ("", "1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{NATIVE_ENV} is {text!r}; set it to 1 or 0 (0 keeps the pure-Python same-host path)")


@dataclass(frozen=True)
class CollectiveOptions:
    """The collective's settings, fixed for the life of a communicator."""

    # the defaults are the settings table's (hopsml.config), written there once
    timeout_s: float = DEFAULT_TIMEOUT_S
    shared_memory: bool = config.default("collective_shm")
    host_id: str = config.default("collective_host_id")  # empty: the host's own identity
    gpu_mode: str = config.default("gpu_collective")  # auto, nccl or host
    native: bool = True  # the compiled same-host small exchange where it is built (every rank must agree)

    def __post_init__(self) -> None:
        timeout = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or timeout <= 0:
            raise SettingsError(f"the collective timeout is {timeout!r}; it must be a positive number of seconds "
                                f"(timeout_s, or {TIMEOUT_ENV}), such as 300")
        if not isinstance(self.shared_memory, bool):
            raise SettingsError(f"shared_memory is {self.shared_memory!r}; pass True or False ({SHM_ENV})")
        if not isinstance(self.host_id, str):
            raise SettingsError(f"host_id is {self.host_id!r}; pass a string, or '' for this host's own identity")
        if not isinstance(self.native, bool):
            raise SettingsError(f"native is {self.native!r}; pass True or False ({NATIVE_ENV})")
        if self.gpu_mode not in GPU_MODES:
            raise SettingsError(f"gpu_mode is {self.gpu_mode!r}; pass one of {', '.join(GPU_MODES)} "
                                f"({GPU_MODE_ENV}; auto: NCCL where every rank has its own GPU)")
        object.__setattr__(self, "timeout_s", float(timeout))

    @classmethod
    def from_settings(cls, settings: config.Settings | config.RunSettings, timeout_s: float | None = None
                      ) -> CollectiveOptions:
        """From a resolved `config.Settings` (the run's snapshot); `timeout_s` overrides its timeout."""
        return cls(timeout_s=timeout_s if timeout_s is not None else settings.collective_timeout_s,
                   shared_memory=settings.collective_shm, host_id=settings.collective_host_id,
                   gpu_mode=settings.gpu_collective, native=native_from_environment())

    @classmethod
    def resolve(cls, timeout_s: float | None = None) -> CollectiveOptions:
        """From this process's settings (argument > HOPSML_* > hopsml.toml > default), for ranks connected
        without the launcher."""
        return cls(timeout_s=config.value("collective_timeout_s", timeout_s),
                   shared_memory=config.value("collective_shm"), host_id=config.value("collective_host_id"),
                   gpu_mode=config.value("gpu_collective"), native=native_from_environment())
