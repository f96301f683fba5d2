"""A training loop of all-reduces whose one rank is slower, for the timeline's straggler tests (local Spark in
tests/spark/test_timeline.py, two hosts in tests/cluster/test_stragglers.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

STEPS = 30


def slowed_train(slow_rank: int | None, where: str, delay_s: float = 0.04, steps: int = STEPS,
                 final_mib: int = 0) -> Callable[[], dict[str, Any]]:
    """`steps` all-reduces of 4 KiB, each after 5 ms of compute; `slow_rank` is slower by `delay_s` for its
    input ('input') or compute ('compute'); with `final_mib`, one all-reduce of that many MiB at the end (network
    traffic between hosts). Returns the sum it saw and the rank's host."""

    def train() -> dict[str, Any]:
        import socket

        import numpy as np

        from hopsml import collective, timeline

        rank = collective.rank()

        def batches():
            for step in range(steps):
                if rank == slow_rank and where == "input":
                    time.sleep(delay_s)
                yield np.full(1024, step, np.float32)

        total = 0.0
        for batch in timeline.input_waits(batches()):
            with timeline.span("compute"):
                time.sleep(0.005 + (delay_s if rank == slow_rank and where == "compute" else 0.0))
            total += float(collective.allreduce(batch)[0])
        if final_mib:
            collective.allreduce(np.ones(final_mib << 18, np.float32))
        return {"total": total, "host": socket.gethostname()}

    return train
