"""One seed per run: the random number generators a run's function uses all start from it, and the record
keeps it, so a rerun can start them the same way.

The driver picks the run seed (the verb's `seed=`, else a fresh random one) and every rank and trial seeds,
before the function runs: Python's `random`, numpy's global generator, torch (CPU and CUDA) and TensorFlow
when the function uses them (imports them, or they are imported already), and hopsml's own: the readers'
shuffling (`hopsml.data.reader` without a `seed`) and the searches' sampling. Every rank gets the same seed:
data-parallel ranks must start from the same weights; each reader shuffles its own shard.
"""

from __future__ import annotations

import os
import random
import secrets
import sys
import types

from hopsml.cluster import preflight
from hopsml.errors import HopsmlError

_FRAMEWORKS = ("torch", "tensorflow", "keras")


def resolve(seed: object) -> int:
    """The run's seed: `seed` checked, or when it is None the seed of the run being rerun
    (HOPSML_RERUN_SEED, set by `hopsml experiments rerun`), else a fresh one."""
    if seed is None:
        recorded = os.environ.get("HOPSML_RERUN_SEED", "")
        return int(recorded) if recorded.isdigit() else secrets.randbelow(2**31)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise HopsmlError(f"seed must be a whole number from 0 to 2**32 - 1, got {seed!r}")
    return seed


def _used(fn: object, depth: int = 3) -> set[str]:
    """Top-level modules `fn` uses, and those of the functions it closes over (a launcher's wrapper)."""
    names = set(preflight.used_modules(fn))
    if depth:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if isinstance(value, types.FunctionType):
                names |= _used(value, depth - 1)
    return names


def seed_generators(seed: int, fn: object) -> dict[str, int]:
    """Seed what `fn` will draw from; returns each generator seeded, by name."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    seeded = {"python": seed, "numpy": seed}
    used = _used(fn) | {name for name in _FRAMEWORKS if name in sys.modules}
    if "torch" in used:
        import torch

        torch.manual_seed(seed)  # CPU and every CUDA device
        seeded["torch"] = seed
    if used & {"tensorflow", "keras"}:
        import tensorflow as tf

        tf.random.set_seed(seed)
        seeded["tensorflow"] = seed
    return seeded
